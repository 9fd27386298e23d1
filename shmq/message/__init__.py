"""The message itself, defined once: what every other package of shmq agrees on.

==================  ===========================================================================
``layout``          the CommitLog record: offsets, magics, sizes, sysFlag bits (mirrors
                    ``shmq/native/layout.h``; tests/layout checks every constant against it)
``record``          the one record decoder (zero-copy) and the pure-Python encoder
``properties``      the properties text ``name\\1value\\2...`` and its byte-level edits
``batch``           the SEND_BATCH_MESSAGE body
``msgid``           offset message ids (IPv4 and IPv6)
``names``           property names, system topics and prefixes, permission bits
``classify``        what the broker does with a message (plain, delayed, timer, half, retry...)
``javahash``        Java's String.hashCode (tag codes, index keys)
``sql_filter``      the SQL92 property filter a consumer subscribes with
==================  ===========================================================================

This package is the bottom of the tree: it imports only ``shmq.errors`` (never protocol,
store, client or broker), so protocol and store, which never import each other, both may
import it. Nothing here loads the C core.
"""
