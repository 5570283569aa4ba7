"""The descriptor pool of the bridge's gRPC messages (a2a.proto, status.proto).

Not protobuf's default pool: a pool takes one definition of each name, and another
copy of lf.a2a.v1 in the same process (an A2A SDK's) would refuse ours, or ours it.
The wire carries field numbers, not names, so both read the same bytes.
scripts/gen-proto.py points the generated modules here.
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pool, struct_pb2, timestamp_pb2

POOL = descriptor_pool.DescriptorPool()
# The well-known types the protos import: a pool resolves imports within itself.
for _known in (any_pb2, struct_pb2, timestamp_pb2):
    POOL.AddSerializedFile(_known.DESCRIPTOR.serialized_pb)
