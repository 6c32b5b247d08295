"""What server-side field validation costs a write, in-process: the schema walk that
finds (and drops) unknown fields of a pod (``fieldvalidation.prune_builtin``) beside a
whole ``Api.create`` of the same pod, in CPU time (``time.process_time``), alternating in
one run so a loaded machine skews both alike; and the duplicate-field scan of a JSON body
(done only for clients that name Strict or Warn) beside the plain ``orjson`` parse.

    python bench/field_validation_bench.py --pods 3000 --repeat 5
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time

import orjson

from gpushare.apiserver.http import duplicates
from gpushare.apiserver.registry.api import Api
from gpushare.apiserver.schema import fieldvalidation
from gpushare.apiserver.storage.store import Store


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": "bench"},
                         "annotations": {"gpu-fraction": "0.25"}},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "command": ["python3", "-c", "pass"],
                                     "env": [{"name": "A", "value": "1"}],
                                     "resources": {"requests": {"cpu": "100m"}}}]}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        api = Api(Store(os.path.join(tmp, "state.db"), commit_thread=False))
        info = api.registry("root").get("", "v1", "pods")
        assert info is not None
        schema = fieldvalidation.builtin_definition(info)
        walks, whole, scans, parses = [], [], [], []
        for r in range(args.repeat):
            bodies = [pod(f"p{r}-{i}") for i in range(args.pods)]
            copies = copy.deepcopy(bodies)
            start = time.process_time()
            for body in copies:
                fieldvalidation.prune_builtin(body, schema)
            walks.append((time.process_time() - start) / args.pods * 1e6)
            start = time.process_time()
            for body in bodies:
                api.create("root", info, "default", body)
            whole.append((time.process_time() - start) / args.pods * 1e6)
            raw = [orjson.dumps(pod(f"x{i}")) for i in range(args.pods)]
            start = time.process_time()
            for text in raw:
                duplicates._json_duplicates(text)
            scans.append((time.process_time() - start) / args.pods * 1e6)
            start = time.process_time()
            for text in raw:
                orjson.loads(text)
            parses.append((time.process_time() - start) / args.pods * 1e6)
    walk, create = statistics.median(walks), statistics.median(whole)
    print(f"unknown-field walk of a pod: {walk:.1f} us CPU; Api.create of it (walk "
          f"included): {create:.1f} us; the walk is {100 * walk / create:.1f} % of a create")
    print(f"duplicate scan of its JSON body: {statistics.median(scans):.1f} us; orjson parse: "
          f"{statistics.median(parses):.1f} us")


if __name__ == "__main__":
    main()
