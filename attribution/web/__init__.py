"""web: the dashboard `attribution serve` shows at /ui/: the job list, a job's failure, a node's history, the
fleet and the drain candidates, rendered on the server (Jinja2 templates with autoescape), readable without
JavaScript, behind the same tokens as the API (a login form that sets a signed session cookie)."""
