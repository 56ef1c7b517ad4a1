"""The pipeline's assets, one module per stage (collected by ``load_from_defs_folder``)."""
