// RocketMQ 5.3.1's Java remoting client against shmq: timer messages, the lite pull consumer,
// a push consumer in POP mode. Prints one JSON object per line; the Python test judges them.
//   V5Client timers <namesrv> <topic> <delays ms, comma list>   send timers, then lite-pull them
//   V5Client pop <namesrv> <brokerAddr> <topic> <group> <consumers> <n>   POP-mode push consumers
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageRequestMode;

public class V5Client {
    static void out(String json) { System.out.println(json); System.out.flush(); }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("timers")) timers(a[1], a[2], a[3]);
        else pop(a[1], a[2], a[3], a[4], Integer.parseInt(a[5]), Integer.parseInt(a[6]));
        System.exit(0);
    }

    static void timers(String ns, String topic, String delays) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("v5-timer-pg");
        p.setNamesrvAddr(ns);
        p.start();
        String[] ds = delays.split(",");
        for (int i = 0; i < ds.length; i++) {
            Message m = new Message(topic, "t", ("timer-" + i).getBytes("UTF-8"));
            long due = System.currentTimeMillis() + Long.parseLong(ds[i]);
            m.setDeliverTimeMs(due);
            SendResult r = p.send(m);
            out("{\"event\":\"sent\",\"i\":" + i + ",\"due\":" + due + ",\"status\":\"" + r.getSendStatus() + "\"}");
        }
        p.shutdown();
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("v5-lite-cg");
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.start();
        int got = 0;
        long deadline = System.currentTimeMillis() + 60000;
        while (got < ds.length && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(1000)) {
                got++;
                out("{\"event\":\"message\",\"body\":\"" + new String(m.getBody(), "UTF-8") + "\",\"store\":"
                    + m.getStoreTimestamp() + ",\"seen\":" + System.currentTimeMillis() + ",\"out\":\""
                    + m.getProperty("TIMER_OUT_MS") + "\"}");
            }
        }
        c.shutdown();
        out("{\"event\":\"done\",\"got\":" + got + "}");
    }

    static void pop(String ns, String brokerAddr, String topic, String group, int consumers, int n) throws Exception {
        ConcurrentHashMap<String, AtomicInteger> seen = new ConcurrentHashMap<>();
        Set<String> who = ConcurrentHashMap.newKeySet();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (int k = 0; k < consumers; k++) {
            final String name = "c" + k;
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
            c.setNamesrvAddr(ns);
            c.setInstanceName("v5pop-" + k);
            c.setClientRebalance(false);          // ask the broker (QUERY_ASSIGNMENT): POP mode
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    String b = new String(m.getBody());
                    seen.computeIfAbsent(b, x -> new AtomicInteger()).incrementAndGet();
                    who.add(name);
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            if (k == 0) {
                c.start();
                c.getDefaultMQPushConsumerImpl().getmQClientFactory().getMQClientAPIImpl()
                    .setMessageRequestMode(brokerAddr, topic, group, MessageRequestMode.POP, 0, 5000);
            } else {
                c.start();
            }
            cs.add(c);
        }
        DefaultMQProducer p = new DefaultMQProducer("v5-pop-pg");
        p.setNamesrvAddr(ns);
        p.start();
        for (int i = 0; i < n; i++) p.send(new Message(topic, ("pop-" + i).getBytes()));
        p.shutdown();
        long deadline = System.currentTimeMillis() + 90000;
        while (seen.size() < n && System.currentTimeMillis() < deadline) Thread.sleep(200);
        Thread.sleep(1000);
        int dup = 0;
        for (AtomicInteger v : seen.values()) if (v.get() > 1) dup++;
        for (DefaultMQPushConsumer c : cs) c.shutdown();
        out("{\"event\":\"done\",\"unique\":" + seen.size() + ",\"duplicates\":" + dup + ",\"consumers\":" + who.size() + "}");
    }
}
