#!/usr/bin/env python3
"""Extracts the vendored schema subsets from the engines' own OpenAPI (swagger 2.0) documents.

Usage: extract.py KUBEVIRT_SWAGGER CDI_SWAGGER
  KUBEVIRT_SWAGGER: api/openapi-spec/swagger.json of the kubevirt/kubevirt repository
  CDI_SWAGGER:      api/openapi-spec/swagger.json of kubevirt/containerized-data-importer
Writes kubevirt-definitions.json and cdi-definitions.json here: every definition reachable by
$ref from the roots below, unchanged. See README.md for the commits they were taken from.
"""
import json
import sys

KUBEVIRT_ROOTS = ["v1.VirtualMachine", "v1beta1.VirtualMachineSnapshot"]
CDI_ROOTS = ["v1beta1.DataVolume"]


def closure(defs, roots):
    out, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        if name not in defs:
            raise SystemExit("missing definition " + name)
        out[name] = defs[name]

        def walk(x):
            if isinstance(x, dict):
                for k, v in x.items():
                    if k == "$ref":
                        todo.append(v.split("/")[-1])
                    else:
                        walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)

        walk(defs[name])
    return out


def main():
    for src, roots, dst in ((sys.argv[1], KUBEVIRT_ROOTS, "kubevirt-definitions.json"),
                            (sys.argv[2], CDI_ROOTS, "cdi-definitions.json")):
        doc = json.load(open(src))
        sub = closure(doc["definitions"], roots)
        with open(dst, "w") as f:
            json.dump({"swagger": "2.0", "info": doc["info"], "definitions": dict(sorted(sub.items()))},
                      f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
