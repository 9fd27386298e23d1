// A re-implementation of what Apache RocketMQ's benchmark tools do (rocketmq-example's
// org.apache.rocketmq.example.benchmark.Producer / Consumer; that artifact is not served by the
// registry reachable here, so bench/vs_rocketmq.py runs this instead), on rocketmq-client 4.9.8:
//
//   RmqBench producer <namesrv> <topic> <threads> <bodyBytes> <warmupSec> <measureSec>
//       <threads> threads, each sending synchronously in a loop with one DefaultMQProducer
//       (compression off, as the tool sets it), a fixed body of <bodyBytes>; every second a
//       JSON line with that second's send TPS and RT avg / max / p99 (ms); after warm-up and
//       measurement a "summary" line over the measured window only, then exit.
//   RmqBench consumer <namesrv> <topic> <group> <threads>
//       a DefaultMQPushConsumer (clustering, "*", <threads> consume threads) counting what it
//       receives; per second a JSON line with the wall clock, that second's consume TPS, the
//       running sums of born-to-store (B2S), store-to-consume (S2C) and born-to-consume (B2C)
//       times and that second's B2C / S2C max (ms, from the message's own timestamps); runs
//       until its stdin closes.
//
// Where it differs from the tool: RT is taken with System.nanoTime (the tool: currentTimeMillis)
// and a p99 is reported (the tool prints avg and max only); lines are JSON, not prose.
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class RmqBench {
    static void out(String json) { System.out.println(json); System.out.flush(); }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("producer")) {
            producer(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]),
                     Integer.parseInt(a[5]), Integer.parseInt(a[6]));
        } else {
            consumer(a[1], a[2], a[3], Integer.parseInt(a[4]));
        }
        System.exit(0);
    }

    /** Log-linear histogram of microseconds: exact below 64 µs, then 32 buckets per power of two (3 %). */
    static final class Hist {
        static final int SUB = 64, N = SUB + 40 * (SUB / 2);
        final AtomicLongArray c = new AtomicLongArray(N);

        static int index(long us) {
            if (us < SUB) return (int) Math.max(0, us);
            int msb = 63 - Long.numberOfLeadingZeros(us);
            int shift = msb - 5;                      // keep 6 significant bits: mantissa 32..63
            return Math.min(N - 1, SUB + (shift - 1) * (SUB / 2) + (int) (us >> shift) - SUB / 2);
        }

        static long lower(int idx) {                  // the smallest value of bucket idx
            if (idx < SUB) return idx;
            int shift = (idx - SUB) / (SUB / 2) + 1;
            long mant = (idx - SUB) % (SUB / 2) + SUB / 2;
            return mant << shift;
        }

        void add(long us) { c.incrementAndGet(index(us)); }

        long[] snapshot() {
            long[] s = new long[N];
            for (int i = 0; i < N; i++) s[i] = c.get(i);
            return s;
        }

        static double quantileMs(long[] now, long[] before, double q) {
            long total = 0;
            for (int i = 0; i < N; i++) total += now[i] - (before == null ? 0 : before[i]);
            if (total == 0) return 0;
            long rank = (long) Math.ceil(q * total), seen = 0;
            for (int i = 0; i < N; i++) {
                seen += now[i] - (before == null ? 0 : before[i]);
                if (seen >= rank) return lower(i) / 1000.0;
            }
            return lower(N - 1) / 1000.0;
        }
    }

    static String f(double v) { return String.format("%.3f", v); }

    static String jsonString(String v) {
        if (v == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : v.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(' ');
            else b.append(c);
        }
        return b.append('"').toString();
    }

    // ------------------------------------------------------------------ producer --
    static void producer(String ns, String topic, int threads, int size, int warmup, int measure) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("benchmark_producer");
        p.setNamesrvAddr(ns);
        p.setInstanceName(Long.toString(System.nanoTime()));
        p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        p.start();
        final byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'a');
        final Hist hist = new Hist();
        final LongAdder ok = new LongAdder(), notOk = new LongAdder(), failed = new LongAdder(), rtSum = new LongAdder();
        final AtomicLong maxUs = new AtomicLong();
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<String> firstError = new AtomicReference<>();  // why sends failed, said once
        Thread[] ts = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            ts[i] = new Thread(() -> {
                while (!stop.get()) {
                    long t0 = System.nanoTime();
                    try {
                        SendResult r = p.send(new Message(topic, body));
                        long us = (System.nanoTime() - t0) / 1000;
                        hist.add(us);
                        rtSum.add(us);
                        maxUs.accumulateAndGet(us, Math::max);
                        (r.getSendStatus() == SendStatus.SEND_OK ? ok : notOk).increment();
                    } catch (Exception e) {
                        failed.increment();
                        firstError.compareAndSet(null, String.valueOf(e));
                    }
                }
            }, "bench-send-" + i);
            ts[i].start();
        }
        long[] prevH = hist.snapshot(), startH = null;
        long prevN = 0, prevSum = 0, startN = 0, startSum = 0, startFail = 0, startNotOk = 0, winMax = 0;
        long t0 = System.nanoTime(), winStartMs = System.currentTimeMillis();
        for (int sec = 1; sec <= warmup + measure; sec++) {
            long due = t0 + sec * 1_000_000_000L;
            while (System.nanoTime() < due) Thread.sleep(Math.max(1, (due - System.nanoTime()) / 1_000_000));
            long[] h = hist.snapshot();
            long n = ok.sum() + notOk.sum(), sum = rtSum.sum(), mx = maxUs.getAndSet(0);
            long dn = n - prevN;
            out("{\"kind\":\"producer\",\"sec\":" + sec + ",\"tps\":" + dn + ",\"avg_ms\":" + f(dn == 0 ? 0 : (sum - prevSum) / 1000.0 / dn)
                + ",\"max_ms\":" + f(mx / 1000.0) + ",\"p99_ms\":" + f(Hist.quantileMs(h, prevH, 0.99))
                + ",\"failed\":" + failed.sum() + ",\"not_ok\":" + notOk.sum() + "}");
            if (sec == warmup) {
                winStartMs = System.currentTimeMillis();
                startH = h; startN = n; startSum = sum; startFail = failed.sum(); startNotOk = notOk.sum();
            } else if (sec > warmup) {
                winMax = Math.max(winMax, mx);
            }
            prevH = h; prevN = n; prevSum = sum;
        }
        long n = prevN - startN;
        out("{\"kind\":\"summary\",\"role\":\"producer\",\"threads\":" + threads + ",\"size\":" + size
            + ",\"seconds\":" + measure + ",\"start_ms\":" + winStartMs + ",\"end_ms\":" + System.currentTimeMillis()
            + ",\"sent\":" + n + ",\"tps\":" + f(n / (double) measure)
            + ",\"avg_ms\":" + f(n == 0 ? 0 : (prevSum - startSum) / 1000.0 / n)
            + ",\"p50_ms\":" + f(Hist.quantileMs(prevH, startH, 0.50))
            + ",\"p99_ms\":" + f(Hist.quantileMs(prevH, startH, 0.99))
            + ",\"p999_ms\":" + f(Hist.quantileMs(prevH, startH, 0.999))
            + ",\"max_ms\":" + f(winMax / 1000.0) + ",\"failed\":" + (failed.sum() - startFail)
            + ",\"not_ok\":" + (notOk.sum() - startNotOk) + ",\"first_error\":" + jsonString(firstError.get()) + "}");
        stop.set(true);
        for (Thread t : ts) t.join(5000);
        p.shutdown();
    }

    // ------------------------------------------------------------------ consumer --
    static void consumer(String ns, String topic, String group, int threads) throws Exception {
        final LongAdder n = new LongAdder(), b2s = new LongAdder(), s2c = new LongAdder(), b2c = new LongAdder();
        final AtomicLong maxB2c = new AtomicLong(), maxS2c = new AtomicLong();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(Long.toString(System.nanoTime()));
        c.setConsumeThreadMin(threads);
        c.setConsumeThreadMax(threads);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                long born = m.getBornTimestamp(), store = m.getStoreTimestamp();
                b2s.add(store - born);
                s2c.add(now - store);
                b2c.add(now - born);
                maxB2c.accumulateAndGet(now - born, Math::max);
                maxS2c.accumulateAndGet(now - store, Math::max);
                n.increment();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        out("{\"kind\":\"consumer_started\"}");
        final AtomicBoolean eof = new AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try { while (System.in.read() >= 0) { } } catch (java.io.IOException e) { }
            eof.set(true);
        }, "stdin-eof");
        stdin.setDaemon(true);
        stdin.start();
        long prevN = 0, t0 = System.nanoTime();
        for (int sec = 1; !eof.get(); sec++) {
            long due = t0 + sec * 1_000_000_000L;
            while (System.nanoTime() < due && !eof.get()) Thread.sleep(Math.max(1, Math.min(100, (due - System.nanoTime()) / 1_000_000)));
            if (eof.get()) break;
            long k = n.sum();
            // cumulative sums: the caller diffs the lines at both ends of the producer's window
            out("{\"kind\":\"consumer\",\"sec\":" + sec + ",\"t_ms\":" + System.currentTimeMillis()
                + ",\"tps\":" + (k - prevN) + ",\"n\":" + k + ",\"b2s_sum\":" + b2s.sum() + ",\"s2c_sum\":" + s2c.sum()
                + ",\"b2c_sum\":" + b2c.sum() + ",\"b2c_max_ms\":" + maxB2c.getAndSet(0)
                + ",\"s2c_max_ms\":" + maxS2c.getAndSet(0) + "}");
            prevN = k;
        }
        c.shutdown();
    }
}
