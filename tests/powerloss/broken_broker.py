"""A deliberately broken broker, for testing the power-loss harness itself (never used
otherwise): the real ``shmq-broker`` whose SYNC_FLUSH sends are answered SEND_OK before their
flush, the bug RocketMQ has had (an answer that says "on disk" when the bytes are only in the
page cache). A harness that passes this broker proves nothing.

Run as ``python tests/powerloss/broken_broker.py <shmq-broker arguments>``. The breakage is in
``broken_site/sitecustomize.py``, which Python imports at start-up in the supervisor and in
every worker it spawns (they inherit PYTHONPATH); production code is untouched."""
import os
import sys

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "broken_site")


def main() -> None:
    env = dict(os.environ, SHMQ_POWERLOSS_BROKEN="answer-before-flush")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SITE, env.get("PYTHONPATH")) if p)
    os.execve(sys.executable, [sys.executable, "-m", "shmq.cli.broker", *sys.argv[1:]], env)


if __name__ == "__main__":
    main()
