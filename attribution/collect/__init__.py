"""collect: gather a job's observations from where they live. Only this stage (and the store) does I/O.

Each collector splits a pure parser (bytes or text in, observations out) from the reading, and reports its
coverage: ok, empty, missing or error, with a reason and a line count. It never decides what a line means.
"""
