"""HTTP: the ASGI app, the server process, discovery, OpenAPI, tables, protobuf bodies and
the node proxy."""
