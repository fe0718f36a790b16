"""rulepack: the YAML rule pack (rules/) loaded, validated once at the boundary and checked (`rules check`)."""
