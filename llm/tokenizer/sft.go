package tokenizer

// WithChatTemplate returns a copy of t that renders conversations with the
// Jinja chat template src instead of the checkpoint's, as transformers does
// after `tokenizer.chat_template = src` (TRL's SFTConfig.chat_template_path
// sets it the same way, https://huggingface.co/docs/trl/sft_trainer). The
// template gets the same special-token variables and is probed at once, so
// one this Jinja implementation cannot run is an *UnsupportedError here.
// t is unchanged; the copy shares its (read-only) vocabulary and model.
func (t *Tokenizer) WithChatTemplate(src string) (*Tokenizer, error) {
	ct, err := compileChat(src, t.tokens)
	if err != nil {
		return nil, err
	}
	c := *t
	c.chat = ct
	return &c, nil
}
