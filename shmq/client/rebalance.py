"""Queue allocation strategies (pure): RocketMQ's AllocateMessageQueueAveragely, so a group
mixing shmq and Java/ali-ons consumers splits queues the same way on every member."""
from __future__ import annotations


def allocate_averagely(queues: list, client_ids: list[str], me: str) -> list:
    """Each client takes a contiguous run of the sorted queues; the first (n mod c) clients
    take one more. Both lists must be sorted the same way on every member."""
    if me not in client_ids or not queues:
        return []
    index = client_ids.index(me)
    n, c = len(queues), len(client_ids)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if (mod > 0 and index < mod) else index * size + mod
    count = min(size, n - start)
    return [queues[(start + i) % n] for i in range(max(0, count))]
