"""What an array's elements are, as every metadata dialect spells them: data types and fill values
(`dtypes.py`), shapes (`shapes.py`). Below both the codecs and the metadata model, which read them;
it imports nothing of zarrfs but its errors."""
