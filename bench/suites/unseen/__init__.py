"""A third vocabulary for the suite generator, written from scratch for the generator-swap check."""
