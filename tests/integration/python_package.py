#!/usr/bin/env python3
"""What tests/integration/python_client_test.cpp asks of plexus.sim and plexus.open_db: prints
what they return, as JSON, for the test to compare with the plexus program's own files.

usage: python_package.py sim            (a small simulation, its results)
       python_package.py db PATH        (what a server's database holds)
"""
import hashlib
import json
import os
import sys
import tempfile

import plexus


def main():
    if sys.argv[1] == "sim":
        r = plexus.sim(rounds=2, clients=4, clients_per_round=2, seed=7, quiet=True)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.csv")
            r.to_csv(path)
            with open(path, encoding="utf-8") as f:
                csv_lines = f.read().splitlines()
        try:
            plexus.sim(rounds=2, partition="nonsense", quiet=True)
            bad = ""
        except RuntimeError as e:
            bad = str(e)
        print(json.dumps({"summary": r.summary, "rounds": r.rounds, "csv_lines": len(csv_lines), "bad": bad}))
    else:
        db = plexus.open_db(sys.argv[2])
        model = db.model()
        state = db.state_dict(db.versions()[-1])
        print(json.dumps({
            "model_name": db.model_name,
            "versions": db.versions(),
            "rounds": db.rounds(),
            "tensors": {k: list(v.shape) for k, v in model.items()},
            "values_sha256": hashlib.sha256(b"".join(v.tobytes() for v in model.values())).hexdigest(),
            "state_dict_matches": all(state[k].numpy().tobytes() == v.tobytes() for k, v in model.items()),
        }))


if __name__ == "__main__":
    main()
