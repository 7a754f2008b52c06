"""The untrusted side of the evaluation boundary: the runner process that holds a candidate.

Everything in this package runs beside candidate code, so nothing here judges: it loads the
candidate, calls its entry on inputs the judge put in a shared arena, copies the outputs back,
and reports what it saw. It imports only the standard library, torch and triton — never the
judging code (`gates.*` outside this package, `agentloop.*`). The judge imports from here
(the wire format, the measurement loop), never the other way round. See docs/security.md.
"""
