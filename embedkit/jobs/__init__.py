"""Embedding a whole corpus: one process with bounded memory (`streaming`), one shard of it
(`sharding`) in the part-file format of `parts`, or every shard on a Ray cluster (`distributed`);
`run_report` is what each of them reports. Encoders themselves live in `embedkit.encode`.
"""
