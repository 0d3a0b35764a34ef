"""Record batches as bytes: the v2 header view, the record codec, compression.

Shared by the broker (storage, coordinators, metadata), the client and the Spark
reader, so it imports none of them: ``batch`` (the 61-byte header, CRC32C, in-place
stamping), ``codec`` (full record encode/decode), ``compression`` (gzip, snappy, lz4,
zstd through cramjam, with bounded decompression), ``errors`` and ``file_range``.
"""
