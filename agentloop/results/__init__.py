"""What runs leave behind and how it is read: the results store (SQLite), the kernel archive
across runs, the report (summary.json, report.md/html) and its plots and templates."""
