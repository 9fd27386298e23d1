#!/usr/bin/env bash
# Issue 16's headline rows in one go, each beside its limit rows and peers in the same run:
#
#     bench/headline.sh [--apache]        # about 10 minutes; 20 with --apache
#
# Local send() and send_batch(64) (beside it the page-floor row: its records into new page-cache
# pages, the limit the 5 M/s target meets here), the local e2e with the futex wait and
# busy-polling, the TCP paths over one connection (bench/tcp_paths.py, 2 rounds) and, with --apache, the
# pair against Apache RocketMQ (bench/vs_rocketmq.py, one round, both flush modes). Run it
# from a tree whose .venv is built (scripts/test or scripts/run made it), on a quiet machine:
# every figure it prints is a ratio within this run, not a number to compare across days.
set -u
cd "$(dirname "$0")/.."
PY=.venv/bin/python
B=.venv/bin/shmq-bench
run() { echo; echo "## $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; "$@"; }
run $B produce --transport local --peers py-floor,mpqueue,faster-fifo,zmq
run $B produce --transport local --batch 64 --peers py-floor,page-floor,mpqueue,faster-fifo,zmq
# a pause after the produce rows: this VM's host stops both vCPUs for the rest of a 100 ms period
# after a run over its CPU quota, and the send_batch row leaves dirty pages behind; the e2e rows
# that followed at once saw shmq p99 7.6-13.8 ms beside a 1.5 ms limit row (RESULTS, Session 8, tail)
sleep 20
run $B e2e --transport local --peers futex-limit,spin-limit,mpqueue,faster-fifo,zmq
run $B e2e --transport local --peers futex-limit,spin-limit,faster-fifo --spin-us 2000000
run $PY bench/tcp_paths.py --duration 3 --rounds 2
if [ "${1:-}" = "--apache" ]; then
    run $PY bench/vs_rocketmq.py --rounds 1 --measure 10
fi
echo; echo "## $(date -u +%H:%M:%S) done"
