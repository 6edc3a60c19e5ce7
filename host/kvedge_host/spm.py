"""A sentencepiece tokenizer.model (the Hub's format) written as llama2.c's tokenizer.bin (the device's format),
piece by piece as llama2.c's tokenizer.py exports it: BOS and EOS become "\\n<s>\\n" and "\\n</s>\\n", the
sentencepiece space mark U+2581 a space, scores kept as float32. The file writer is the device package's
(kvedge.model.tiny.write_tokenizer)."""
from kvedge.model import tiny


def convert(model_path, out_path):
    """Write out_path from the sentencepiece model at model_path; returns the vocabulary size. A file that is not
    a sentencepiece model raises ValueError naming it."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.Load(model_path)
    except (OSError, RuntimeError) as e:
        raise ValueError("%s: not a sentencepiece model (%s)" % (model_path, str(e).strip().splitlines()[0]))
    n = sp.GetPieceSize()
    bos, eos = sp.bos_id(), sp.eos_id()

    def pieces():
        for i in range(n):
            t = sp.IdToPiece(i)
            if i == bos:
                t = "\n<s>\n"
            elif i == eos:
                t = "\n</s>\n"
            yield t.replace("\u2581", " ").encode("utf-8"), sp.GetScore(i)

    return tiny.write_tokenizer(out_path, pieces=pieces)
