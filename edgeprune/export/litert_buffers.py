"""One copy of each constant a `.tflite` holds twice.

A LiteRT model's tensors point at buffers by index, and any number of tensors may point at one buffer, whatever
their types and shapes, as long as the bytes are theirs. The converter shares a constant only between the ops that
read the same traced tensor; two tensors built to hold the same bytes get a buffer each. `litert-int4-all`'s
embedding lookup reads the output layer's 4-bit codes as int8 pairs (edgeprune/quantize/tied_output.py): the same
bytes as the output layer's INT4 weight, which kept twice cost SmolLM2 14.2 MB (105.9 MB against 91.7).
"""

import hashlib

import numpy as np

LEAST_BYTES = 1024  # smaller buffers are left alone: a shared scalar saves nothing worth a rewrite
FLATBUFFER_LIMIT = 2**31 - 2**24  # a flatbuffer addresses 2 GB; past it LiteRT keeps weights after it, at offsets


def share_identical_buffers(data: bytes) -> tuple[bytes, int]:
    """`data` (a `.tflite` flatbuffer) with every tensor of a buffer whose bytes an earlier buffer holds pointed at
    that earlier one, and the later emptied; and how many bytes that saved. Weights kept past the flatbuffer come
    back inside it. `data` itself when nothing repeats, or for a model near 2 GB, which a flatbuffer cannot hold."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    if len(data) >= FLATBUFFER_LIMIT:
        return data, 0
    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    buffers = list(model.buffers or [])
    for buffer in buffers:
        if buffer.offset > 1:  # kept past the flatbuffer (ai-edge-quantizer writes them so): taken in, to be packed
            buffer.data = np.frombuffer(data, np.uint8, count=buffer.size, offset=buffer.offset)
            buffer.offset = buffer.size = 0
    metadata = {entry.buffer for entry in model.metadata or []}  # read by name, never by a tensor: left as they are
    first: dict[bytes, int] = {}
    repeats: dict[int, int] = {}
    for index, buffer in enumerate(buffers):
        payload = buffer.data
        if index in metadata or payload is None or len(payload) < LEAST_BYTES:
            continue
        payload = np.asarray(payload, dtype=np.uint8)
        key = hashlib.sha256(payload.tobytes()).digest()
        if key in first and np.array_equal(np.asarray(buffers[first[key]].data, dtype=np.uint8), payload):
            repeats[index] = first[key]
        else:
            first.setdefault(key, index)
    if not repeats:
        return data, 0
    for subgraph in model.subgraphs or []:
        for tensor in subgraph.tensors or []:
            tensor.buffer = repeats.get(tensor.buffer, tensor.buffer)
    saved = 0
    for index in repeats:  # emptied, not removed: every other buffer keeps its index
        saved += len(buffers[index].data)
        buffers[index].data = None
    builder = flatbuffers.Builder(len(data))
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), saved
