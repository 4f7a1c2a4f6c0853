#!/usr/bin/python3
"""The outside reader of `zero checkpoint export`: Python's own torch and a safetensors reader
written here from the format's spec (no safetensors package, no numpy) read the exports back and
compare them with checkpoint_maker's reference (the engine's full parameters and the buffers).

usage: read_export.py REF.safetensors EXPORT:DTYPE[:exact]...
  EXPORT  a .safetensors file, a sharded export's .index.json, or a --format torch .pt file
  DTYPE   fp32 or bf16: the dtype the export's parameters must have
  exact   parameters bit-identical to the reference; otherwise equal once both are rounded to
          bf16 (a bf16 export, or any export of a bf16 run). Buffers are always bit-identical.
Exit 0 when every export matches; 1 with a line per mismatch.
"""
import json
import os
import struct
import sys

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
WANT = {"fp32": torch.float32, "bf16": torch.bfloat16}


def read_safetensors(path):
    """{name: tensor}, metadata. Layout: u64 LE header size N, N bytes of JSON, the data."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    base, end = 8 + n, 0
    tensors = {}
    for name, info in header.items():
        begin, stop = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        numel = 1
        for d in info["shape"]:
            numel *= d
        item = torch.tensor([], dtype=dtype).element_size()
        if stop - begin != numel * item:
            raise ValueError(f"{path}: {name}: {stop - begin} bytes for shape {info['shape']}")
        raw = bytearray(data[base + begin:base + stop])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"])
        end = max(end, stop)
    if base + end != len(data):
        raise ValueError(f"{path}: data ends at {base + end} but the file has {len(data)} bytes")
    return tensors, metadata


def read_sharded(index_path):
    """A Hugging Face sharded export: its index's weight_map names each tensor's shard."""
    with open(index_path) as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    tensors, total = {}, 0
    for shard in sorted(set(weight_map.values())):
        part, metadata = read_safetensors(os.path.join(os.path.dirname(index_path), shard))
        if metadata.get("format") != "pt":
            raise ValueError(f"{shard}: metadata format is {metadata.get('format')!r}, not 'pt'")
        for name, t in part.items():
            if weight_map.get(name) != shard:
                raise ValueError(f"{name} is in {shard} but the index says {weight_map.get(name)}")
            tensors[name] = t
            total += t.numel() * t.element_size()
    if total != index["metadata"]["total_size"]:
        raise ValueError(f"total_size {index['metadata']['total_size']} != {total} bytes")
    return tensors


def read_export(path):
    if path.endswith(".pt"):
        loaded = torch.load(path)
        if not isinstance(loaded, dict):
            raise ValueError(f"torch.load({path}) gave {type(loaded).__name__}, not a dict")
        return loaded
    if path.endswith(".index.json"):
        return read_sharded(path)
    return read_safetensors(path)[0]


def compare(ref, buffers, path, want, exact):
    got = read_export(path)
    problems = []
    if set(got) != set(ref):
        problems.append(f"names differ: missing {sorted(set(ref) - set(got))}, "
                        f"extra {sorted(set(got) - set(ref))}")
    for name, r in ref.items():
        g = got.get(name)
        if g is None:
            continue
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(r.shape):
            problems.append(f"{name}: not a tensor of shape {tuple(r.shape)}")
        elif name in buffers:
            if g.dtype != r.dtype or not torch.equal(g, r):
                problems.append(f"{name}: buffer differs ({g.dtype} vs {r.dtype})")
        elif g.dtype != want:
            problems.append(f"{name}: dtype {g.dtype}, expected {want}")
        elif exact and not torch.equal(g, r.to(want)):
            problems.append(f"{name}: not bit-identical (max diff {(g.float() - r).abs().max()})")
        elif not exact and not torch.equal(g.to(torch.bfloat16), r.to(torch.bfloat16)):
            problems.append(f"{name}: differs after rounding to bf16")
    for p in problems:
        print(f"FAIL {path}: {p}")
    if not problems:
        kind = "bit-identical" if exact else "equal in bf16"
        print(f"ok {path}: {len(ref)} tensors, {kind}")
    return not problems


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    ref, metadata = read_safetensors(argv[1])
    buffers = set(filter(None, metadata.get("buffers", "").split(",")))
    ok = True
    for spec in argv[2:]:
        path, dtype, *rest = spec.rsplit(":", 2) if spec.endswith(":exact") else spec.rsplit(":", 1)
        ok = compare(ref, buffers, path, WANT[dtype], rest == ["exact"]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
