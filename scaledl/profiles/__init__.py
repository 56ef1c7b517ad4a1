"""What a profile is: the tables' names, columns and vocabulary, below their producers and readers.

:mod:`~scaledl.profiles.tables` (the table names; the collective and API-cost vocabulary of
``collective_timings``) and :mod:`~scaledl.profiles.schemas` (each table's columns, dtypes and
ranges). The profiler (:mod:`scaledl.profiling`) writes these tables, validation
(:mod:`scaledl.validation`) checks them, importers (:mod:`scaledl.external`) produce them and the
models read them; none of them is imported here.
"""
