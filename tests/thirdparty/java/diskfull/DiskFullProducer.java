// The Apache RocketMQ 4.9.8 Java producer against a shmq broker whose disk is full
// (tests/faults/test_java_disk_full.py).
//   java DiskFullProducer NAMESRV TOPIC COUNT SIZE TAG
// Sends COUNT messages of SIZE incompressible bytes (body starts with "TAG-i-"), no retries, and
// prints one JSON object per send: {"event":"sent","status":...,"offset":...} or
// {"event":"refused","code":...,"message":...}; a refusal does not stop the run.
import java.util.Random;

import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

public class DiskFullProducer {
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
        System.exit(0);
    }

    static void run(String[] a) throws Exception {
        String ns = a[0], topic = a[1], tag = a[4];
        int count = Integer.parseInt(a[2]), size = Integer.parseInt(a[3]);
        DefaultMQProducer producer = new DefaultMQProducer("javaDiskFullPG");
        producer.setNamesrvAddr(ns);
        producer.setRetryTimesWhenSendFailed(0);
        producer.setCompressMsgBodyOverHowmuch(1 << 24);  // stored as sent: the test counts bytes
        producer.setSendMsgTimeout(20000);                  // a loaded CI machine, not a timing test
        producer.start();
        Random rnd = new Random(42);
        for (int i = 0; i < count; i++) {
            byte[] head = (tag + "-" + i + "-").getBytes("UTF-8");
            byte[] body = new byte[head.length + size];
            rnd.nextBytes(body);
            System.arraycopy(head, 0, body, 0, head.length);
            try {
                SendResult r = producer.send(new Message(topic, body));
                System.out.println("{\"event\":\"sent\",\"status\":" + q(r.getSendStatus().name())
                        + ",\"offset\":" + r.getQueueOffset() + "}");
            } catch (Exception e) {
                Throwable t = e;  // the broker's answer, possibly wrapped by the retry loop
                while (t != null && !(t instanceof MQBrokerException)) t = t.getCause();
                if (t != null) {
                    MQBrokerException b = (MQBrokerException) t;
                    System.out.println("{\"event\":\"refused\",\"code\":" + b.getResponseCode() + ",\"message\":"
                            + q(b.getErrorMessage()) + "}");
                } else {
                    System.out.println("{\"event\":\"refused\",\"code\":-1,\"message\":" + q(e.toString()) + "}");
                }
            }
        }
        producer.shutdown();
    }
}
