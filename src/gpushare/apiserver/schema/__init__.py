"""The shape of objects: schemas, validation, CEL rules, patches, managed fields, conversions."""
