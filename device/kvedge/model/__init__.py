# A llama2.c-format model on the kvedge cache: checkpoint readers, the forward pass, tokenizer and sampler.
# Import the module you need (kvedge.model.llama, kvedge.model.tokenizer, ...): a board pays only for those.
