"""rulepack: the YAML rule pack (rules/) loaded and validated once at the boundary, and the node hook's filter
generated from it. Running every rule's examples through the collectors and extract (`rules check`) is a use
case: pipeline.rulecheck."""
