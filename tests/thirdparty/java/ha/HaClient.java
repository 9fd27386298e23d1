// The Apache RocketMQ 4.9.8 Java client against shmq master/slave pairs (test_ha_java.py).
//   java HaClient produce NAMESRV TOPIC COUNT PREFIX   -> one {"event":"sent",...} per send
//   java HaClient consume NAMESRV GROUP TOPIC COUNT SECONDS
//        -> {"event":"message","body":...} per message until COUNT distinct bodies (or SECONDS), then done
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class HaClient {
    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("produce")) {
            produce(a[1], a[2], Integer.parseInt(a[3]), a[4]);
        } else {
            consume(a[1], a[2], a[3], Integer.parseInt(a[4]), Integer.parseInt(a[5]));
        }
        System.exit(0);
    }

    static void produce(String ns, String topic, int count, String prefix) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("javaHaPG");
        producer.setNamesrvAddr(ns);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        for (int i = 0; i < count; i++) {
            String body = prefix + i;
            SendResult r = producer.send(new Message(topic, "TagA", body.getBytes("UTF-8")));
            System.out.println("{\"event\":\"sent\",\"status\":" + q(r.getSendStatus().name()) + ",\"body\":" + q(body)
                + ",\"broker\":" + q(r.getMessageQueue().getBrokerName()) + "}");
        }
        producer.shutdown();
    }

    static void consume(String ns, String group, String topic, int count, int seconds) throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch all = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollNameServerInterval(1000);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody());
                System.out.println("{\"event\":\"message\",\"body\":" + q(body) + "}");
                seen.add(body);
            }
            if (seen.size() >= count) all.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        boolean complete = all.await(seconds, TimeUnit.SECONDS);
        System.out.println("{\"event\":\"done\",\"complete\":" + complete + ",\"distinct\":" + seen.size() + "}");
        System.out.flush();
        c.shutdown();
    }
}
