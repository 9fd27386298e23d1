"""The worker's Python per held one-message pull, in process (no sockets): decode the PULL
frame, Processor.pull parks it at the queue's max offset, one put, PullHolds.check answers it
(the frame is kept). The cycle of a sync producer and a PushConsumer on one worker, minus the
syscalls and the send's own handling. Prints process CPU per cycle, per put alone, and the
difference (the pull's part).

    .venv/bin/python bench/pull_held_cpu.py [N] [cprofile]
    OLD=<path of another processors/pull.py> .venv/bin/python bench/pull_held_cpu.py N   # A/B

Under ``valgrind --tool=callgrind --separate-threads=yes`` at two N, the main thread's
instruction difference / (N2 - N1) is an instruction count per cycle that load does not move."""
import asyncio, sys, time, tempfile, shutil, os
from types import SimpleNamespace
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from shmq.store import MessageStore
from shmq.store.config import StoreConfig
from shmq.broker.shared.config import BrokerConfig
from shmq.broker.worker.processors.pull import Processor
from shmq.broker.worker.pull_hold import PullHolds
from shmq.protocol import RemotingCommand, RequestCode, encode_command, decode_command
from shmq.protocol.bodies import TopicConfig, SubscriptionData

root = tempfile.mkdtemp(prefix="tcpcons5-")
store = MessageStore.open(StoreConfig(root=root, disk_max_used_space_ratio=100))
loop = asyncio.new_event_loop()
holds = PullHolds(store, loop)
cfg = BrokerConfig()
sub = SubscriptionData(topic="T", subString="*", subVersion=1, expressionType="TAG")
w = SimpleNamespace(cfg=cfg, store=store, holds=holds, stats={"get": 0},
                    topics={"T": TopicConfig(topicName="T", readQueueNums=4, writeQueueNums=4)},
                    cached_subscription=lambda g, t: sub)
if os.environ.get("OLD"):
    import importlib.util
    spec = importlib.util.spec_from_file_location("shmq.broker.worker.processors._pull_old", os.environ["OLD"])
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    Processor = mod.Processor
p = Processor(w)
out = []
class Conn:
    closed = False; peer = "127.0.0.1:1"; context = {}
    limits = SimpleNamespace(max_inflight=64)
    def send(self, cmd): out.append(encode_command(cmd))
    def write_frame(self, f): out.append(f)
conn = Conn()
store.put("T", 0, b"x" * 100, {"TAGS": "a"})
def frame(off, opaque):
    ext = {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": str(off), "maxMsgNums": "32",
           "sysFlag": "3", "commitOffset": str(off - 1), "suspendTimeoutMillis": "15000",
           "subscription": "*", "subVersion": "1", "expressionType": "TAG"}
    return encode_command(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=opaque, ext_fields=ext))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
frames = [frame(i + 1, i) for i in range(N)]
prof = sys.argv[2] if len(sys.argv) > 2 else ""
def run():
    for i in range(N):
        cmd = decode_command(frames[i][4:])
        r = p.pull(conn, cmd)
        assert r is None, r
        store.put("T", 0, b"x" * 100, {"TAGS": "a"})
        holds.check()
if prof == "cprofile":
    import cProfile, pstats
    cProfile.run("run()", os.path.join(root, "prof.out"))
    pstats.Stats(os.path.join(root, "prof.out")).sort_stats("tottime").print_stats(25)
else:
    # time the put separately: subtract it
    t0 = time.process_time(); run(); t1 = time.process_time()
    t2 = time.process_time()
    for i in range(N): store.put("T", 0, b"x" * 100, {"TAGS": "a"})
    t3 = time.process_time()
    print(f"cycle {1e6*(t1-t0)/N:.2f} us, put {1e6*(t3-t2)/N:.2f} us, pull-part {1e6*((t1-t0)-(t3-t2))/N:.2f} us/pull; answers {len(out)}")
assert len(out) == N
store.close(); shutil.rmtree(root)
