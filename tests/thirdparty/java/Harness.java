// Apache RocketMQ's Java client (rocketmq-client 4.9.8) against a NameServer + broker, for
// tests/thirdparty/test_java_client.py. One JVM runs many named scenarios:
//
//   java Harness <namesrv> <prefix> <scenario>...
//
// Scenario S uses topic <prefix>_S (the test creates it, 4 queues) and groups named after it,
// and prints one JSON line {"scenario": S, ...} holding what was sent and what was received
// (ids, bodies, queues, times), so the Python test asserts the behaviour, not an exit status.
// A scenario that throws prints {"scenario": S, "error": "..."}.
//
//   java Harness member <namesrv> <topic> <group> <instance>
//
// runs one clustering push consumer until stdin closes, printing {"recv": body, "queue": q}
// per message and {"alloc": [queues]} whenever its share of the queues changes (the mixed
// Java/Python group test).
import com.alibaba.fastjson.JSON;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

public class Harness {
    static String ns;
    static String prefix;
    static final long WAIT_MS = 30_000;

    public static void main(String[] args) throws Exception {
        if (args[0].equals("member")) {
            member(args[1], args[2], args[3], args[4]);
            return;
        }
        ns = args[0];
        prefix = args[1];
        for (int i = 2; i < args.length; i++) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("scenario", args[i]);
            try {
                Harness.class.getDeclaredMethod(args[i], String.class, Map.class).invoke(null, prefix + "_" + args[i], out);
            } catch (java.lang.reflect.InvocationTargetException e) {
                out.put("error", String.valueOf(e.getCause()));
            }
            System.out.println(JSON.toJSONString(out));
            System.out.flush();
        }
        System.exit(0);  // client threads are not all daemons
    }

    // ------------------------------------------------------------------ helpers --
    static String body(MessageExt m) { return new String(m.getBody(), StandardCharsets.UTF_8); }

    static Message msg(String topic, String tags, String body) {
        Message m = new Message(topic, tags, body.getBytes(StandardCharsets.UTF_8));
        m.setKeys("k-" + body);
        return m;
    }

    static DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(ns);
        p.setInstanceName(group);
        p.setSendMsgTimeout(10_000);
        p.start();
        return p;
    }

    static DefaultMQPushConsumer push(String group, String instance, MessageModel model) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance);
        c.setMessageModel(model);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(2);
        c.setConsumeThreadMax(4);
        return c;
    }

    /** A concurrent listener that records every message as {body, queue, ms after birth}. */
    static MessageListenerConcurrently recorder(List<Map<String, Object>> got) {
        return (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("body", body(m));
                r.put("queue", m.getQueueId());
                r.put("msgId", m.getMsgId());
                r.put("tags", m.getTags());
                r.put("afterBorn", now - m.getBornTimestamp());
                r.put("afterStore", now - m.getStoreTimestamp());
                synchronized (got) { got.add(r); }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
    }

    static void await(Collection<?> got, int n, long ms) throws InterruptedException {
        long end = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < end) {
            synchronized (got) { if (got.size() >= n) break; }
            Thread.sleep(50);
        }
    }

    /** Wait until the consumer has its queues (its first rebalance done). */
    static void settle(DefaultMQPushConsumer c, String topic) throws Exception {
        long end = System.currentTimeMillis() + 15_000;
        while (System.currentTimeMillis() < end
                && c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().isEmpty()) {
            Thread.sleep(50);
        }
    }

    /** The queues of the consumer's own topics (not of its group's %RETRY% topic) it holds now. */
    static List<Integer> queuesOf(DefaultMQPushConsumer c) {
        List<Integer> q = new ArrayList<>();
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (!mq.getTopic().startsWith("%RETRY%")) q.add(mq.getQueueId());
        }
        Collections.sort(q);
        return q;
    }

    // ------------------------------------------------------------------ scenarios --
    /** sync, async, oneway and batch sends into one topic, consumed by one push consumer. */
    public static void send_modes(String topic, Map<String, Object> out) throws Exception {
        List<Map<String, Object>> got = new ArrayList<>();
        DefaultMQPushConsumer c = push("cg_" + topic, "c_" + topic, MessageModel.CLUSTERING);
        c.subscribe(topic, "*");
        c.registerMessageListener(recorder(got));
        c.start();
        DefaultMQProducer p = producer("pg_" + topic);
        List<String> sent = new ArrayList<>(), ids = new ArrayList<>();
        List<String> statuses = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            SendResult r = p.send(msg(topic, "sync", "sync-" + i));
            sent.add("sync-" + i); ids.add(r.getMsgId()); statuses.add(r.getSendStatus().name());
        }
        CountDownLatch latch = new CountDownLatch(10);
        List<String> asyncIds = Collections.synchronizedList(new ArrayList<>());
        for (int i = 0; i < 10; i++) {
            p.send(msg(topic, "async", "async-" + i), new SendCallback() {
                public void onSuccess(SendResult r) { asyncIds.add(r.getMsgId()); latch.countDown(); }
                public void onException(Throwable e) { asyncIds.add("error:" + e); latch.countDown(); }
            });
            sent.add("async-" + i);
        }
        latch.await(20, TimeUnit.SECONDS);
        for (int i = 0; i < 10; i++) {
            p.sendOneway(msg(topic, "oneway", "oneway-" + i));
            sent.add("oneway-" + i);
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            batch.add(msg(topic, "batch", "batch-" + i));
            sent.add("batch-" + i);
        }
        SendResult br = p.send(batch);
        await(got, sent.size(), WAIT_MS);
        Thread.sleep(500);  // a duplicate delivery would arrive now
        out.put("sent", sent);
        out.put("syncIds", ids);
        out.put("syncStatus", statuses);
        out.put("asyncIds", asyncIds);
        out.put("batchStatus", br.getSendStatus().name());
        out.put("batchIds", br.getMsgId());
        synchronized (got) { out.put("received", new ArrayList<>(got)); }
        c.shutdown();
        p.shutdown();
    }

    /** Orderly: 4 order ids, each to its own queue through a selector, consumed orderly. */
    public static void orderly(String topic, Map<String, Object> out) throws Exception {
        List<Map<String, Object>> got = new ArrayList<>();
        DefaultMQPushConsumer c = push("cg_" + topic, "c_" + topic, MessageModel.CLUSTERING);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("body", body(m));
                r.put("queue", m.getQueueId());
                r.put("offset", m.getQueueOffset());
                synchronized (got) { got.add(r); }
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        settle(c, topic);
        DefaultMQProducer p = producer("pg_" + topic);
        MessageQueueSelector byOrder = (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size());
        List<String> sent = new ArrayList<>();
        List<Integer> sentQueues = new ArrayList<>();
        for (int seq = 0; seq < 15; seq++) {
            for (int order = 0; order < 4; order++) {
                String b = "o" + order + "-" + seq;
                SendResult r = p.send(msg(topic, "T", b), byOrder, order);
                sent.add(b);
                sentQueues.add(r.getMessageQueue().getQueueId());
            }
        }
        await(got, sent.size(), WAIT_MS);
        Thread.sleep(500);
        out.put("sent", sent);
        out.put("sentQueues", sentQueues);
        out.put("locked", queuesOf(c));
        synchronized (got) { out.put("received", new ArrayList<>(got)); }
        c.shutdown();
        p.shutdown();
    }

    /** Delay level 2 (5 s by default): not delivered before its time. */
    public static void delay(String topic, Map<String, Object> out) throws Exception {
        List<Map<String, Object>> got = new ArrayList<>();
        DefaultMQPushConsumer c = push("cg_" + topic, "c_" + topic, MessageModel.CLUSTERING);
        c.subscribe(topic, "*");
        c.registerMessageListener(recorder(got));
        c.start();
        settle(c, topic);
        DefaultMQProducer p = producer("pg_" + topic);
        List<String> sent = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            Message m = msg(topic, "d", "delay-" + i);
            m.setDelayTimeLevel(2);
            p.send(m);
            sent.add("delay-" + i);
        }
        p.send(msg(topic, "now", "now-0"));
        sent.add("now-0");
        await(got, sent.size(), WAIT_MS);
        out.put("sent", sent);
        synchronized (got) { out.put("received", new ArrayList<>(got)); }
        c.shutdown();
        p.shutdown();
    }

    /** Transactions: commit, rollback, and unknown-then-checked-back (the check commits). */
    public static void transaction(String topic, Map<String, Object> out) throws Exception {
        List<Map<String, Object>> got = new ArrayList<>();
        DefaultMQPushConsumer c = push("cg_" + topic, "c_" + topic, MessageModel.CLUSTERING);
        c.subscribe(topic, "*");
        c.registerMessageListener(recorder(got));
        c.start();
        List<String> checks = Collections.synchronizedList(new ArrayList<>());
        TransactionMQProducer p = new TransactionMQProducer("pg_" + topic);
        p.setNamesrvAddr(ns);
        p.setInstanceName("pg_" + topic);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                String b = new String(m.getBody(), StandardCharsets.UTF_8);
                if (b.startsWith("commit")) return LocalTransactionState.COMMIT_MESSAGE;
                if (b.startsWith("rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }
            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                checks.add(body(m));
                return body(m).startsWith("unknown") ? LocalTransactionState.COMMIT_MESSAGE
                        : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        p.start();
        List<String> states = new ArrayList<>();
        for (String kind : new String[] {"commit", "rollback", "unknown"}) {
            for (int i = 0; i < 3; i++) {
                TransactionSendResult r = p.sendMessageInTransaction(msg(topic, kind, kind + "-" + i), null);
                states.add(r.getLocalTransactionState().name());
            }
        }
        await(got, 6, WAIT_MS);
        Thread.sleep(1500);  // a rolled-back message would show up now
        out.put("states", states);
        out.put("checks", new ArrayList<>(checks));
        synchronized (got) { out.put("received", new ArrayList<>(got)); }
        c.shutdown();
        p.shutdown();
    }

    /** Two consumers of one group: clustering splits the queues, broadcasting gives all to each. */
    static void twoMembers(String topic, Map<String, Object> out, MessageModel model) throws Exception {
        List<Map<String, Object>> a = new ArrayList<>(), b = new ArrayList<>();
        DefaultMQPushConsumer ca = push("cg_" + topic, "a_" + topic, model);
        DefaultMQPushConsumer cb = push("cg_" + topic, "b_" + topic, model);
        ca.subscribe(topic, "*");
        cb.subscribe(topic, "*");
        ca.registerMessageListener(recorder(a));
        cb.registerMessageListener(recorder(b));
        ca.start();
        cb.start();
        settle(ca, topic);
        settle(cb, topic);
        Thread.sleep(model == MessageModel.CLUSTERING ? 3000 : 500);  // both see each other
        DefaultMQProducer p = producer("pg_" + topic);
        List<String> sent = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            p.send(msg(topic, "t", "m-" + i));
            sent.add("m-" + i);
        }
        long end = System.currentTimeMillis() + WAIT_MS;
        int want = model == MessageModel.CLUSTERING ? sent.size() : 2 * sent.size();
        while (System.currentTimeMillis() < end) {
            synchronized (a) { synchronized (b) { if (a.size() + b.size() >= want) break; } }
            Thread.sleep(50);
        }
        Thread.sleep(500);
        out.put("sent", sent);
        out.put("queuesA", queuesOf(ca));
        out.put("queuesB", queuesOf(cb));
        synchronized (a) { out.put("receivedA", new ArrayList<>(a)); }
        synchronized (b) { out.put("receivedB", new ArrayList<>(b)); }
        ca.shutdown();
        cb.shutdown();
        p.shutdown();
    }

    public static void clustering(String topic, Map<String, Object> out) throws Exception {
        twoMembers(topic, out, MessageModel.CLUSTERING);
    }

    public static void broadcasting(String topic, Map<String, Object> out) throws Exception {
        twoMembers(topic, out, MessageModel.BROADCASTING);
    }

    /** Tag filter "TagA || TagB" over messages tagged TagA, TagB and TagC. */
    public static void tag_filter(String topic, Map<String, Object> out) throws Exception {
        filtered(topic, out, null);
    }

    /** SQL92 "a BETWEEN 3 AND 6": the consumer is pulling (held) before anything is sent, so
     * every match arrives through a held pull that wakes up. */
    public static void sql_filter(String topic, Map<String, Object> out) throws Exception {
        filtered(topic, out, MessageSelector.bySql("a BETWEEN 3 AND 6"));
    }

    static void filtered(String topic, Map<String, Object> out, MessageSelector sql) throws Exception {
        List<Map<String, Object>> got = new ArrayList<>();
        DefaultMQPushConsumer c = push("cg_" + topic, "c_" + topic, MessageModel.CLUSTERING);
        if (sql == null) c.subscribe(topic, "TagA || TagB");
        else c.subscribe(topic, sql);
        c.registerMessageListener(recorder(got));
        c.start();
        settle(c, topic);
        Thread.sleep(1500);  // the first pulls find nothing and are held by the broker
        DefaultMQProducer p = producer("pg_" + topic);
        List<String> sent = new ArrayList<>();
        String[] tags = {"TagA", "TagB", "TagC"};
        for (int i = 0; i < 12; i++) {
            Message m = msg(topic, tags[i % 3], "f-" + i);
            m.putUserProperty("a", String.valueOf(i % 10));
            p.send(m);
            sent.add("f-" + i);
            Thread.sleep(20);  // one at a time: each wakes a held pull
        }
        Thread.sleep(4000);  // time for unwanted messages to show up too
        out.put("sent", sent);
        synchronized (got) { out.put("received", new ArrayList<>(got)); }
        c.shutdown();
        p.shutdown();
    }

    /** DefaultLitePullConsumer subscribe: every message polled once. */
    public static void lite_subscribe(String topic, Map<String, Object> out) throws Exception {
        DefaultMQProducer p = producer("pg_" + topic);
        List<String> sent = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            p.send(msg(topic, "l", "lite-" + i));
            sent.add("lite-" + i);
        }
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("cg_" + topic);
        c.setNamesrvAddr(ns);
        c.setInstanceName("c_" + topic);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        List<String> got = new ArrayList<>();
        long end = System.currentTimeMillis() + WAIT_MS;
        while (got.size() < sent.size() && System.currentTimeMillis() < end) {
            for (MessageExt m : c.poll(500)) got.add(body(m));
        }
        for (MessageExt m : c.poll(1000)) got.add(body(m));
        out.put("sent", sent);
        out.put("received", got);
        c.shutdown();
        p.shutdown();
    }

    /** DefaultLitePullConsumer assign: only the two queues assigned, from their beginning; then
     *  seek back to 0 re-delivers them. The seek comes once the first pass is drained: a seek
     *  while the client's own pull task still has a pull from offset 0 in flight may deliver
     *  that pull as well (a race inside the Java client, against any broker). */
    public static void lite_assign(String topic, Map<String, Object> out) throws Exception {
        DefaultMQProducer p = producer("pg_" + topic);
        Map<String, Integer> sentQueue = new LinkedHashMap<>();
        for (int i = 0; i < 20; i++) {
            SendResult r = p.send(msg(topic, "l", "lite-" + i));
            sentQueue.put("lite-" + i, r.getMessageQueue().getQueueId());
        }
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("cg_" + topic);
        c.setNamesrvAddr(ns);
        c.setInstanceName("c_" + topic);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAutoCommit(false);
        c.start();
        List<MessageQueue> mine = new ArrayList<>();
        for (MessageQueue mq : c.fetchMessageQueues(topic)) {
            if (mq.getQueueId() < 2) mine.add(mq);
        }
        c.assign(mine);
        long want = sentQueue.values().stream().filter(q -> q < 2).count();
        List<Map<String, Object>> got = pollAssigned(c, want);
        for (MessageQueue mq : mine) c.seek(mq, 0);
        List<Map<String, Object>> again = pollAssigned(c, want);
        out.put("sentQueue", sentQueue);
        out.put("assigned", mine.stream().map(MessageQueue::getQueueId).sorted().toArray());
        out.put("received", got);
        out.put("afterSeek", again);
        c.shutdown();
        p.shutdown();
    }

    /** Polls until want messages came (or WAIT_MS), then once more for any extra. */
    static List<Map<String, Object>> pollAssigned(DefaultLitePullConsumer c, long want) {
        List<Map<String, Object>> got = new ArrayList<>();
        long end = System.currentTimeMillis() + WAIT_MS;
        while (got.size() < want && System.currentTimeMillis() < end) {
            for (MessageExt m : c.poll(500)) got.add(Map.of("body", body(m), "queue", m.getQueueId()));
        }
        for (MessageExt m : c.poll(1000)) got.add(Map.of("body", body(m), "queue", m.getQueueId()));
        return got;
    }

    /** Request-reply: producer.request waits for the reply a consumer sends (SEND_REPLY_MESSAGE). */
    public static void request_reply(String topic, Map<String, Object> out) throws Exception {
        DefaultMQProducer replier = producer("rp_" + topic);
        DefaultMQPushConsumer c = push("cg_" + topic, "c_" + topic, MessageModel.CLUSTERING);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("re:" + body(m)).getBytes(StandardCharsets.UTF_8));
                    replier.send(reply);
                } catch (Exception e) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        settle(c, topic);
        DefaultMQProducer p = producer("pg_" + topic);
        List<String> replies = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            Message r = p.request(msg(topic, "q", "ask-" + i), 10_000);
            replies.add(r == null ? null : new String(r.getBody(), StandardCharsets.UTF_8));
        }
        out.put("replies", replies);
        c.shutdown();
        p.shutdown();
        replier.shutdown();
    }

    // ------------------------------------------------------------------ member mode --
    static void member(String namesrv, String topic, String group, String instance) throws Exception {
        ns = namesrv;
        DefaultMQPushConsumer c = push(group, instance, MessageModel.CLUSTERING);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("recv", body(m));
                r.put("queue", m.getQueueId());
                synchronized (Harness.class) { System.out.println(JSON.toJSONString(r)); System.out.flush(); }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Thread watcher = new Thread(() -> {
            List<Integer> last = null;
            while (true) {
                List<Integer> now = queuesOf(c);
                if (!now.equals(last)) {
                    last = now;
                    synchronized (Harness.class) {
                        System.out.println(JSON.toJSONString(Map.of("alloc", now, "clientId", c.buildMQClientId())));
                        System.out.flush();
                    }
                }
                try { Thread.sleep(100); } catch (InterruptedException e) { return; }
            }
        });
        watcher.setDaemon(true);
        watcher.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        while (in.readLine() != null) { }
        c.shutdown();
        System.exit(0);
    }
}
