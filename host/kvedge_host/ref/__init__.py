"""Independent references the device code is checked against: numpy models of the attention (numref), the
model (llama_ref), KIVI's quantization (kiviref), and the quality evaluation built on them (quality)."""
