"""The C core, compiled by cffi at install time. ``ffi`` and ``lib`` come from ``shmq.native._core``;
``hot_send`` / ``hot_send_batch`` are ``shmq_send`` / ``shmq_send_batch`` called with the GIL
held, ``hot_encode_batch`` the same batch only encoded (a TCP send's body), and ``hot_read`` the
consumer's record walk (``shmq.native._hot``: the sends in hot_send.c, the walk in hot.c;
``read_queue`` the same walk from a QueueReader's state, ``wait_read`` shmq_wait_queues and
then that read, one call per wake-up of the local pull thread; ``hot_records`` the same decode
over a TCP pull's body; ``read_raw`` a worker's unfiltered pull answer, the records copied);
``bind_ext`` names the class the walk builds, ``bind_message`` the one the send functions read,
whose C base is ``MessageBase`` (hot_message.c), and ``ExtBase`` MessageExt's C base (its numeric
fields, hot_ext.c); ``SendResult`` is C (hot_result.c), and
``bind_result`` gives it SEND_OK and the offset msgId's formatter. ``RemotingSends``
is the broker worker's C path for plain TCP sends (``shmq.native._rsend``, remoting_send.c),
made with ``PUT_ADDRESS``, the address of ``shmq_put_try`` (``shmq_put`` with its try_lock); its
batches (remoting_batch.c) with ``PUT_BATCH_ADDRESS`` and ``BATCH_PHYS_ADDRESS``
(``shmq_put_batch_try``, ``shmq_batch_phys``)."""
from shmq.native import _hot
from shmq.native._rsend import Sends as RemotingSends
from shmq.native._core import ffi, lib

_hot.bind(int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_send"))),
          int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_send_batch"))),
          int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_encode_batch"))))
_hot.bind_wait(int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_wait_queues"))))
hot_send = _hot.send
hot_send_batch = _hot.send_batch
hot_encode_batch = _hot.encode_batch
hot_send_message = _hot.send_message
bind_message = _hot.bind_message
MessageBase = _hot.MessageBase
ExtBase = _hot.ExtBase
LocalSend = _hot.LocalSend
bind_topic = _hot.bind_topic
hot_read = _hot.read
hot_records = _hot.records
read_queue = _hot.read_queue
read_raw = _hot.read_raw
wait_read = _hot.wait_read
bind_ext = _hot.bind_ext
bind_result = _hot.bind_result
SendResult = _hot.SendResult
ProducerBase = _hot.ProducerBase
PUT_ADDRESS = int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_put_try")))
PUT_BATCH_ADDRESS = int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_put_batch_try")))
BATCH_PHYS_ADDRESS = int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_batch_phys")))
QUEUE_CREATE_ADDRESS = int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_queue_create")))

__all__ = ["ffi", "lib", "hot_send", "hot_send_batch", "hot_encode_batch", "hot_send_message", "hot_read", "hot_records", "read_queue", "read_raw",
           "wait_read", "bind_ext", "bind_result", "bind_message", "MessageBase", "ExtBase", "LocalSend", "bind_topic",
           "SendResult", "ProducerBase", "RemotingSends", "PUT_ADDRESS",
           "PUT_BATCH_ADDRESS", "BATCH_PHYS_ADDRESS", "QUEUE_CREATE_ADDRESS"]
