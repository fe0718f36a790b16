"""reports: what people read: the verdict as JSON and text, a job's timeline and the fleet report as HTML pages."""
