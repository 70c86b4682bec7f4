#!/usr/bin/env python3
"""Validates Kubernetes objects against the vendored KubeVirt and CDI schemas, strictly.

Usage: validate_manifests.py SCHEMA_DIR < objects.json   (a JSON array of objects)
Exit 0 when every object of a vendored kind is valid; 1 with one line per error otherwise.

Strict like `kubectl apply --validate=strict`: the engines' OpenAPI documents leave
additionalProperties open, so an object schema with `properties` is closed here (an unknown or
misspelled field is an error, not silently dropped by the API server). Kinds the vendored files do
not cover (NetworkPolicy: core Kubernetes) are listed on stderr and checked by the C++ invariants
only (src/kube/render.cc).
"""
import copy
import json
import os
import sys

import jsonschema

KINDS = {
    ("kubevirt.io/v1", "VirtualMachine"): ("kubevirt-definitions.json", "v1.VirtualMachine"),
    ("snapshot.kubevirt.io/v1beta1", "VirtualMachineSnapshot"):
        ("kubevirt-definitions.json", "v1beta1.VirtualMachineSnapshot"),
    ("cdi.kubevirt.io/v1beta1", "DataVolume"): ("cdi-definitions.json", "v1beta1.DataVolume"),
}
NOT_VENDORED = {("networking.k8s.io/v1", "NetworkPolicy")}


def close_objects(schema):
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for v in schema.values():
            close_objects(v)
    elif isinstance(schema, list):
        for v in schema:
            close_objects(v)


def main():
    schema_dir = sys.argv[1]
    docs = {}
    for name in {f for f, _ in KINDS.values()}:
        with open(os.path.join(schema_dir, name)) as f:
            d = json.load(f)
        close_objects(d["definitions"])
        docs[name] = d["definitions"]
    objects = json.load(sys.stdin)
    errors = 0
    for i, obj in enumerate(objects):
        key = (obj.get("apiVersion"), obj.get("kind"))
        where = "%s/%s" % (key[1], obj.get("metadata", {}).get("name", "#%d" % i))
        if key in NOT_VENDORED:
            print("not in the vendored schemas (invariants only): " + where, file=sys.stderr)
            continue
        if key not in KINDS:
            print("%s: unknown apiVersion/kind %s" % (where, key))
            errors += 1
            continue
        file, root = KINDS[key]
        schema = {"$ref": "#/definitions/" + root, "definitions": copy.deepcopy(docs[file])}
        validator = jsonschema.Draft4Validator(schema)
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
            path = "/".join(str(p) for p in e.absolute_path)
            print("%s: %s: %s" % (where, path or "(root)", e.message))
            errors += 1
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
