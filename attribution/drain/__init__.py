"""drain: which nodes to take out of service (the policy as data, safety caps) and how (scontrol)."""
