"""What runs in the broker supervisor process (one per broker): ``main.py`` (store owner,
worker spawning and restarts, housekeeping), ``control_plane.py`` (the control channel's
server side: topic creation, client registry, queue locks, forwarding to clients),
``clients.py`` and ``locks.py`` (those tables as pure data), ``register.py`` (NameServer
registration), ``schedule.py`` (delayed messages), ``transaction_service.py`` (half-message
check-back)."""
