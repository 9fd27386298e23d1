// The Apache RocketMQ 4.9.8 Java client with AclClientRPCHook against shmq (test_security_acl_java.py).
//   java AclClient NAMESRV ACCESS_KEY SECRET_KEY TOPIC FORBIDDEN_TOPIC COUNT
// Sends COUNT messages to TOPIC, one to FORBIDDEN_TOPIC (expected to fail), consumes TOPIC
// from the first offset until COUNT bodies are seen (or 60 s), one JSON object per line.
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

public class AclClient {
    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] a) {
        try {
            run(a);
        } catch (Throwable t) {  // the client's threads are not daemons: exit, say why
            System.out.println("{\"event\":\"error\",\"message\":" + q(t.toString()) + "}");
            System.exit(1);
        }
    }

    static void run(String[] a) throws Exception {
        String ns = a[0], topic = a[3], forbidden = a[4];
        int count = Integer.parseInt(a[5]);
        RPCHook hook = new AclClientRPCHook(new SessionCredentials(a[1], a[2]));

        DefaultMQProducer producer = new DefaultMQProducer("javaAclPG", hook);
        producer.setNamesrvAddr(ns);
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(20000);  // generous: a loaded CI machine, not a timing test
        producer.start();
        for (int i = 0; i < count; i++) {
            SendResult r = producer.send(new Message(topic, "TagA", ("java-" + i).getBytes("UTF-8")));
            System.out.println("{\"event\":\"sent\",\"status\":" + q(r.getSendStatus().name()) + "}");
        }
        try {
            producer.send(new Message(forbidden, ("no").getBytes("UTF-8")));
            System.out.println("{\"event\":\"forbidden-sent\"}");
        } catch (Exception e) {
            // the broker's answer, possibly wrapped by the producer's retry loop in MQClientException
            Throwable t = e;
            while (t != null && !(t instanceof MQBrokerException)) t = t.getCause();
            if (t != null) {
                MQBrokerException b = (MQBrokerException) t;
                System.out.println("{\"event\":\"refused\",\"code\":" + b.getResponseCode() + ",\"message\":" + q(b.getErrorMessage()) + "}");
            } else {
                System.out.println("{\"event\":\"refused\",\"code\":-1,\"message\":" + q(e.toString()) + "}");
            }
        }
        producer.shutdown();

        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("javaAclCG", hook, new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(ns);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody());
                if (seen.add(body)) {
                    System.out.println("{\"event\":\"message\",\"body\":" + q(body) + "}");
                }
            }
            if (seen.size() >= count) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean ok = done.await(60, TimeUnit.SECONDS);
        consumer.shutdown();
        System.out.println("{\"event\":\"done\",\"consumed\":" + seen.size() + ",\"complete\":" + ok + "}");
        System.exit(0);
    }
}
