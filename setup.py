# The C core is compiled by cffi in API (out-of-line) mode at install time; see
# shmq/native/_build.py. shmq.native._hot is a small CPython extension that calls one core
# function with the GIL held (shmq/native/hot_send.c says why). Everything else is declared in
# pyproject.toml.
from setuptools import Extension, setup

setup(
    cffi_modules=["shmq/native/_build.py:ffibuilder"],
    ext_modules=[Extension("shmq.native._hot",
                           ["shmq/native/hot.c", "shmq/native/hot_wait.c", "shmq/native/hot_send.c", "shmq/native/hot_result.c",
                            "shmq/native/hot_producer.c", "shmq/native/hot_message.c",
                            "shmq/native/hot_ext.c"],
                           include_dirs=["shmq/native"], depends=["shmq/native/queue_read.h"], extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"]),
                 # the broker worker's C path for plain TCP sends and the common pull (remoting_send.c, remoting_pull.c say why)
                 Extension("shmq.native._rsend", ["shmq/native/remoting_send.c", "shmq/native/remoting_batch.c",
                                                     "shmq/native/remoting_pull.c", "shmq/native/remoting_learnt.c"],
                           include_dirs=["shmq/native"],
                           depends=["shmq/native/remoting_header.h", "shmq/native/remoting_send.h",
                                    "shmq/native/queue_read.h"], extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"]),
                 # the TCP producer's per-send C, with the GIL held (hot_remote.c says why)
                 Extension("shmq.native._remote", ["shmq/native/hot_remote.c"], include_dirs=["shmq/native"],
                           extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"]),
                 # the TCP producer's async answers and the consumer's pull answers, read from the read
                 # buffer (remote_answer.c and pull_answer.c say why), and the client connection's read
                 # itself (client_read.c)
                 Extension("shmq.native._answer", ["shmq/native/remote_answer.c", "shmq/native/pull_answer.c",
                                                       "shmq/native/pull_steady.c", "shmq/native/pending_table.c", "shmq/native/client_read.c",
                                                       "shmq/native/conn_queue.c"],
                           include_dirs=["shmq/native"],
                           depends=["shmq/native/remoting_header.h", "shmq/native/send_answer.h", "shmq/native/async_slots.h",
                                    "shmq/native/pull_answer.h", "shmq/native/pull_records.h", "shmq/native/send_frame.h",
                                    "shmq/native/pending_table.h", "shmq/native/hot_result.h", "shmq/native/client_read.h",
                                    "shmq/native/conn_queue.h", "shmq/native/conn_dict.h"], extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"]),
                 # the TCP producer's oneway lane: whole frames written in C (hot_oneway.c says why)
                 Extension("shmq.native._oneway", ["shmq/native/hot_oneway.c", "shmq/native/async_plain.c",
                                                        "shmq/native/lane_direct.c"],
                           include_dirs=["shmq/native"],
                           depends=["shmq/native/send_frame.h", "shmq/native/async_slots.h", "shmq/native/oneway_lane.h",
                                    "shmq/native/hot_message.h", "shmq/native/pending_table.h"], extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"]),
                 # a TCP producer's sync send, whole, with the GIL released while it waits (sync_send.c says why)
                 Extension("shmq.native._sync", ["shmq/native/sync_send.c"], include_dirs=["shmq/native"],
                           depends=["shmq/native/send_frame.h", "shmq/native/send_answer.h", "shmq/native/remoting_header.h"],
                           extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"])],
)
