#!/usr/bin/env node
// Drives ali-ons (a third-party RocketMQ 4.x client from npm) against shmq for the tests.
// Prints one JSON object per line on stdout; ali-ons' own logging goes to stderr.
//
//   node ons_client.js route   --namesrv H:P --topic T
//       {"event":"route","ok":true,"route":{...}}  or  {"event":"route","ok":false,"code":17,"message":"..."}
//   node ons_client.js produce --namesrv H:P --topic T --group G [--count N] [--tags TAG] [--keys K]
//                              [--body TEXT]   (body of message i is TEXT-i)
//       {"event":"sent","index":i,"msgId":...,"offsetMsgId":...,"queueId":...,"queueOffset":...,"status":...}
//   node ons_client.js consume --namesrv H:P --topic T --group G [--count N] [--expr '*'] [--timeout MS]
//                              [--from first|last] [--heartbeat MS]
//       {"event":"message","msgId":...,"topic":...,"tags":...,"keys":[...],"body":"...","queueId":...,"queueOffset":...}
// produce and consume take [--access-key AK --secret-key SK]: ali-ons then signs every request
// (RocketMQ ACL: HmacSHA1 over the sorted header values and the body).
// Every mode ends with {"event":"done",...} and exit code 0, or {"event":"error",...} and exit code 1.
'use strict';

const path = require('path');

function parseArgs(argv) {
  const args = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith('--')) {
      const key = a.slice(2);
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) {
        args[key] = true;
      } else {
        args[key] = next;
        i++;
      }
    } else {
      args._.push(a);
    }
  }
  return args;
}

function credentials(args) {
  return args['access-key'] ? { accessKey: args['access-key'], secretKey: args['secret-key'] } : {};
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// ali-ons asserts an httpclient exists even though it never calls it when nameSrv is given.
const httpclient = {
  async request() {
    throw new Error('httpclient must not be used: nameSrv is set');
  },
};

// Quiet logger: warnings and errors to stderr (the test shows them on failure).
const logger = {
  info() {},
  debug() {},
  warn(...a) { console.error('[ali-ons warn]', ...a); },
  error(...a) { console.error('[ali-ons error]', ...a); },
};

function load() {
  // Resolved next to this script, so the test may run from any directory.
  const root = path.join(__dirname, 'node_modules', 'ali-ons');
  return {
    ons: require(root),
    MQClientAPI: require(path.join(root, 'lib', 'mq_client_api')),
    RemotingCommand: require(path.join(root, 'lib', 'protocol', 'command', 'remoting_command')),
    RequestCode: require(path.join(root, 'lib', 'protocol', 'request_code')),
  };
}

async function route(args) {
  const { MQClientAPI, RemotingCommand, RequestCode } = load();
  const api = new MQClientAPI({ nameSrv: args.namesrv, httpclient, logger, responseTimeout: 5000 });
  await api.ready();
  try {
    // The same request ali-ons' getTopicRouteInfoFromNameServer sends, so the raw body can be
    // shown too; then parsed by ali-ons' own parser (JSON2) exactly as ali-ons does.
    const request = RemotingCommand.createRequestCommand(RequestCode.GET_ROUTEINTO_BY_TOPIC, { topic: args.topic });
    const response = await api.invokeForNameSrvAtLeastOnce(request, Number(args.timeout || 3000));
    if (response.code !== 0) {
      const err = new Error(response.remark);
      err.code = response.code;
      throw err;
    }
    const raw = response.body ? response.body.toString() : null;
    const r = await api.getTopicRouteInfoFromNameServer(args.topic, Number(args.timeout || 3000));
    emit({ event: 'route', ok: true, route: r, raw, language: request.language, version: request.version });
  } catch (err) {
    emit({ event: 'route', ok: false, code: err.code, message: err.message });
  } finally {
    await api.close();
  }
  emit({ event: 'done' });
}

async function produce(args) {
  const { ons } = load();
  const producer = new ons.Producer({
    nameSrv: args.namesrv, httpclient, logger, producerGroup: args.group || 'ons_test_pg',
    instanceName: `p${process.pid}`, ...credentials(args),
  });
  await producer.ready();
  const count = Number(args.count || 1);
  for (let i = 0; i < count; i++) {
    const msg = new ons.Message(args.topic, args.tags || null, Buffer.from(`${args.body || 'msg'}-${i}`));
    if (args.keys) msg.keys = [ `${args.keys}-${i}` ];
    const r = await producer.send(msg);
    emit({
      event: 'sent', index: i, msgId: r.msgId, offsetMsgId: r.offsetMsgId, status: r.sendStatus,
      queueId: r.messageQueue && r.messageQueue.queueId, brokerName: r.messageQueue && r.messageQueue.brokerName,
      queueOffset: r.queueOffset,
    });
  }
  await producer.close();
  emit({ event: 'done', sent: count });
}

async function consume(args) {
  const { ons } = load();
  const count = Number(args.count || 1);
  const consumer = new ons.Consumer({
    nameSrv: args.namesrv, httpclient, logger, consumerGroup: args.group || 'ons_test_cg',
    instanceName: `c${process.pid}`, ...credentials(args),
    consumeFromWhere: args.from === 'last' ? 'CONSUME_FROM_LAST_OFFSET' : 'CONSUME_FROM_FIRST_OFFSET',
    rebalanceInterval: 1000,
    heartbeatBrokerInterval: Number(args.heartbeat || 30000),
  });
  let seen = 0;
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  consumer.subscribe(args.topic, args.expr || '*', async msg => {
    emit({
      event: 'message', msgId: msg.msgId, topic: msg.topic, tags: msg.tags, keys: msg.keys,
      body: msg.body.toString(), queueId: msg.queueId, queueOffset: msg.queueOffset,
      reconsumeTimes: msg.reconsumeTimes,
    });
    seen++;
    if (seen >= count) finish('count');
  });
  consumer.on('error', err => console.error('[consumer error]', err));
  const timer = setTimeout(() => finish('timeout'), Number(args.timeout || 30000));
  const why = await finished;
  clearTimeout(timer);
  await consumer.close();
  emit({ event: 'done', received: seen, reason: why });
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const mode = args._[0];
  if (!args.namesrv || !mode) throw new Error('usage: ons_client.js route|produce|consume --namesrv H:P ...');
  if (mode === 'route') return route(args);
  if (mode === 'produce') return produce(args);
  if (mode === 'consume') return consume(args);
  throw new Error(`unknown mode ${mode}`);
}

main().then(() => process.exit(0), err => {
  emit({ event: 'error', name: err.name, code: err.code, message: err.message });
  process.exit(1);
});
