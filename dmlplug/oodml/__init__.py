"""Out-of-distribution DML benchmark (ooDML): Fréchet distance, split generation, AGS."""
