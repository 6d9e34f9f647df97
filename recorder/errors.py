"""Errors forge-record raises on purpose.

ForgeRecordError            base; the CLI prints its message on one line and exits non-zero
 + UsageError              the user asked for something that cannot be (bad URL, bad option)
 + StoreError              the store cannot be opened, read or written
 |  - SessionNotFound      no session matches the id, prefix or 'last'
 + DecodeError             bytes on the wire break their protocol; caught at the addon,
                           which keeps the raw bytes and flags the exchange
"""


class ForgeRecordError(Exception):
    exit_code = 1


class UsageError(ForgeRecordError):
    exit_code = 2


class StoreError(ForgeRecordError):
    pass


class SessionNotFound(StoreError):
    pass


class DecodeError(ForgeRecordError):
    pass
