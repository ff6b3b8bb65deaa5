#!/usr/bin/env python3
"""Validates grammar-engine outputs with the jsonschema library (an independent validator).

Input: a JSONL file, one {"schema": ..., "output": "<generated text>"} per line.
Exit status 0 when every output parses and validates; otherwise prints each failure."""
import json
import sys

import jsonschema


def main(path):
    failures = 0
    count = 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            case = json.loads(line)
            count += 1
            try:
                instance = json.loads(case["output"])
                jsonschema.Draft202012Validator(case["schema"]).validate(instance)
            except Exception as e:  # noqa: BLE001 - report any failure with its case
                failures += 1
                print(f"line {n}: {type(e).__name__}: {e}\n  schema: {json.dumps(case['schema'])}\n"
                      f"  output: {case['output']}")
    print(f"{count} outputs, {failures} invalid")
    return 1 if failures or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
