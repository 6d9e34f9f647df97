"""forge-record: record what coding agents send to and get from their models."""

__version__ = "0.1.0"
