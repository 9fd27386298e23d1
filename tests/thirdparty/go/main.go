// Apache RocketMQ's Go client (rocketmq-client-go v2) against a NameServer + broker, for
// tests/thirdparty/test_go_client.py:
//
//	shmq-go-harness <namesrv> <topic> <group> <n>
//
// sends n messages synchronously (tag "go", key "gk-<i>"), consumes the topic with a push
// consumer of <group> from its first offset, and prints one JSON line:
// {"sent": [{"body", "msgId", "status", "queue"}...], "received": [{"body", "msgId", "queue", "tags", "keys"}...]}
// after n messages arrived (or 30 s), plus a second's wait for duplicates.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: shmq-go-harness <namesrv> <topic> <group> <n>")
		os.Exit(2)
	}
	ns, topic, group := os.Args[1], os.Args[2], os.Args[3]
	n, _ := strconv.Atoi(os.Args[4])
	rlog.SetLogLevel("error")
	out := map[string]interface{}{}

	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName(group+"-p"),
		producer.WithRetry(2), producer.WithSendMsgTimeout(10*time.Second))
	must(err)
	must(p.Start())
	var sent []map[string]interface{}
	for i := 0; i < n; i++ {
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("go-%d", i)))
		m.WithTag("go")
		m.WithKeys([]string{fmt.Sprintf("gk-%d", i)})
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			sent = append(sent, map[string]interface{}{"body": fmt.Sprintf("go-%d", i), "error": err.Error()})
			continue
		}
		sent = append(sent, map[string]interface{}{"body": fmt.Sprintf("go-%d", i), "msgId": r.MsgID,
			"status": int(r.Status), "queue": r.MessageQueue.QueueId})
	}
	out["sent"] = sent
	must(p.Shutdown())

	var mu sync.Mutex
	var got []map[string]interface{}
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{ns}), consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	must(err)
	must(c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got = append(got, map[string]interface{}{"body": string(m.Body), "msgId": m.MsgId, "queue": m.Queue.QueueId,
				"tags": m.GetTags(), "keys": m.GetKeys()})
		}
		return consumer.ConsumeSuccess, nil
	}))
	must(c.Start())
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	mu.Lock()
	out["received"] = got
	mu.Unlock()
	_ = c.Shutdown()
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
