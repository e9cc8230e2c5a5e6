"""The contract between the halves of XPUShare: what the library, the scheduler, nvsharectl and the
Kubernetes code say to each other and agree on.

- messages: the wire messages, their layouts and constants (native/src/session/protocol.h is the C side);
- protocol: framing, encoding and decoding of those messages;
- ctlschema: the control requests' field types; quota_ranges: what quota values are accepted;
- sizes: how sizes are written and read (the C parser's grammar, within 64 bits);
- paths: where the socket and the library are, and which sockets are trusted;
- scheduling: the scheduling modes, the quantum's range and the context reserve.

It depends on nothing else of xpushare; everything else may depend on it.
"""
