"""extract: observations (log lines, metric series) to normalized events by the rules of a loaded RuleSet. Pure."""
