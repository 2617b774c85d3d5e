"""Validates dtrun run reports against docs/report.schema.json with python3-jsonschema.

    python3 tests/integration/validate_report.py SCHEMA REPORT... -> one line per report; exit 1
    on the first invalid one (with the validator's message and the failing path).
"""
import json
import sys

import jsonschema

schema_path, *reports = sys.argv[1:]
with open(schema_path) as f:
    schema = json.load(f)
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema)
for path in reports:
    with open(path) as f:
        report = json.load(f)
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.path))
    if errors:
        for error in errors[:5]:
            print(f"{path}: INVALID at /{'/'.join(map(str, error.path))}: {error.message}")
        sys.exit(1)
    print(f"{path}: valid ({report['outcome']}, {len(report['attempts'])} attempt(s))")
