"""History as a laboratory (docs/replay.md): the evidence kept for replay (`keep`), a stored job's verdict
re-derived with another rule pack (`rederive`), what that changes (`diff`), applied to the stored history
(`history`: rules diff, reattribute, the unmatched lines), and the templates of what no rule matches (`mine`,
`suggest`)."""
