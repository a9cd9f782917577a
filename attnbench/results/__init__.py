"""Result files and what is made from them: CSV/Parquet/env.json, tables, compare, export, plots,
the e2e report, profiles."""
