#!/usr/bin/python3
"""Writes FILE: a safetensors model of one float32 tensor "w" of PARAMS zeros (PARAMS may be
written 1e6), for `plexus server --initial-model` in the load benchmarks (bench/run_load.sh,
bench/smoke.sh).
usage: make_zero_model.py PARAMS FILE"""
import json
import struct
import sys


def main():
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    n, path = int(float(sys.argv[1])), sys.argv[2]
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.write(bytes(4 * n))


if __name__ == "__main__":
    main()
