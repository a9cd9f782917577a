"""Result files and what is made from them: CSV/Parquet/env.json, tables, compare, export, plots, profiles."""
