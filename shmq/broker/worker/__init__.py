"""What runs in a broker worker process (one of N, all serving the same port with
SO_REUSEPORT): ``main.py`` (the process: servers, channels, the control channel to the
supervisor), ``dispatch.py`` (request code -> handler), ``processors/`` (one module per
request family), ``pull_hold.py`` (long polling), ``retry.py`` (CONSUMER_SEND_MSG_BACK).
Processors see the worker only through ``context.WorkerContext``."""
