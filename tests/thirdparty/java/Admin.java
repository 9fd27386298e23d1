// mqadmin (rocketmq-tools 4.9.8) commands run one after another in one JVM, for
// tests/thirdparty/test_mqadmin.py:
//
//   java Admin <work dir>
//
// reads one JSON array of mqadmin arguments per stdin line (e.g. ["topicList", "-n", addr]),
// runs it through MQAdminStartup.main0 (which returns: only a bad command line makes it
// exit) and answers one JSON line {"out": what the command printed, stdout and stderr}.
// A first argument "--stop-after=MS" interrupts the command after MS milliseconds: clusterRT
// measures in an endless loop (it sleeps between rounds, so the interrupt ends it).
// mqadmin configures logback from ${rocketmq.home}/conf/logback_tools.xml: a quiet one is
// written to the work dir, which becomes rocketmq.home.dir before the tools' classes load.
import com.alibaba.fastjson.JSON;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

public class Admin {
    static final String LOGBACK = "<configuration><root level=\"OFF\"/></configuration>\n";

    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]);
        Files.createDirectories(home.resolve("conf"));
        Files.writeString(home.resolve("conf/logback_tools.xml"), LOGBACK);
        System.setProperty("rocketmq.home.dir", home.toString());  // MixAll.ROCKETMQ_HOME_PROPERTY
        PrintStream realOut = System.out, realErr = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            List<String> argv = JSON.parseArray(line, String.class);
            long stopAfter = 0;
            if (!argv.isEmpty() && argv.get(0).startsWith("--stop-after=")) {
                stopAfter = Long.parseLong(argv.remove(0).substring("--stop-after=".length()));
            }
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            PrintStream cap = new PrintStream(buf, true, StandardCharsets.UTF_8);
            System.setOut(cap);
            System.setErr(cap);
            Thread run = new Thread(() -> {
                try {
                    org.apache.rocketmq.tools.command.MQAdminStartup.main0(argv.toArray(new String[0]), null);
                } catch (Throwable t) {
                    t.printStackTrace(cap);
                }
            });
            try {
                run.start();
                run.join(stopAfter);
                if (run.isAlive()) {
                    run.interrupt();
                    run.join(30_000);
                }
            } finally {
                cap.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            realOut.println(JSON.toJSONString(Map.of("out", buf.toString(StandardCharsets.UTF_8))));
            realOut.flush();
        }
        System.exit(0);
    }
}
