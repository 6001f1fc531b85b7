package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds special tokens around a single encoded sequence
// (https://huggingface.co/docs/tokenizers/api/post-processors). Only the
// single-sequence template matters here: Encode takes one text.
type postProcessor struct {
	prefix, suffix []int
}

func (p *postProcessor) apply(ids []int) []int {
	if p == nil || (len(p.prefix) == 0 && len(p.suffix) == 0) {
		return ids
	}
	out := make([]int, 0, len(p.prefix)+len(ids)+len(p.suffix))
	out = append(out, p.prefix...)
	out = append(out, ids...)
	return append(out, p.suffix...)
}

// then composes q after p (Sequence).
func (p *postProcessor) then(q *postProcessor) *postProcessor {
	if p == nil {
		return q
	}
	if q == nil {
		return p
	}
	pre := append(append([]int{}, q.prefix...), p.prefix...)
	suf := append(append([]int{}, p.suffix...), q.suffix...)
	return &postProcessor{prefix: pre, suffix: suf}
}

func parsePostProcessor(raw json.RawMessage, depth int) (*postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, badJSON("post_processor", "nested deeper than %d", maxDepth)
	}
	var h struct {
		Type          string                     `json:"type"`
		Processors    []json.RawMessage          `json:"processors"`
		Single        []json.RawMessage          `json:"single"`
		SpecialTokens map[string]json.RawMessage `json:"special_tokens"`
		Sep           []json.RawMessage          `json:"sep"`
		Cls           []json.RawMessage          `json:"cls"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, badJSON("post_processor", "%v", err)
	}
	switch h.Type {
	case "Sequence":
		var acc *postProcessor
		for _, r := range h.Processors {
			p, err := parsePostProcessor(r, depth+1)
			if err != nil {
				return nil, err
			}
			acc = acc.then(p)
		}
		return acc, nil
	case "ByteLevel":
		return nil, nil // only trims offsets; ids are unchanged
	case "TemplateProcessing":
		return parseTemplate(h.Single, h.SpecialTokens)
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenPair("post_processor."+h.Type+".cls", h.Cls)
		if err != nil {
			return nil, err
		}
		sep, err := tokenPair("post_processor."+h.Type+".sep", h.Sep)
		if err != nil {
			return nil, err
		}
		return &postProcessor{prefix: []int{cls}, suffix: []int{sep}}, nil
	case "":
		return nil, badJSON("post_processor", "missing type")
	}
	return nil, unsupported("post_processor", h.Type,
		"supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence")
}

// tokenPair reads ["token", id].
func tokenPair(field string, raw []json.RawMessage) (int, error) {
	var id int
	if len(raw) != 2 || json.Unmarshal(raw[1], &id) != nil || id < 0 || id > maxID {
		return 0, badJSON(field, "want [token, id]")
	}
	return id, nil
}

// parseTemplate reads TemplateProcessing's single template: SpecialToken
// items become prefix or suffix ids, the one Sequence item marks the text.
func parseTemplate(single []json.RawMessage, specials map[string]json.RawMessage) (*postProcessor, error) {
	p := &postProcessor{}
	seen := false
	for i, it := range single {
		var item struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		}
		if err := json.Unmarshal(it, &item); err != nil {
			return nil, badJSON(fmt.Sprintf("post_processor.single[%d]", i), "%v", err)
		}
		switch {
		case item.Sequence != nil:
			if seen {
				return nil, unsupported("post_processor.TemplateProcessing", "single", "the sequence appears twice")
			}
			seen = true
		case item.SpecialToken != nil:
			raw, ok := specials[item.SpecialToken.ID]
			if !ok {
				return nil, badJSON("post_processor.special_tokens", "%q is used by the template but not defined", item.SpecialToken.ID)
			}
			var sp struct {
				IDs []int `json:"ids"`
			}
			if err := json.Unmarshal(raw, &sp); err != nil {
				return nil, badJSON("post_processor.special_tokens."+item.SpecialToken.ID, "%v", err)
			}
			for _, id := range sp.IDs {
				if id < 0 || id > maxID {
					return nil, badJSON("post_processor.special_tokens."+item.SpecialToken.ID, "id %d out of range", id)
				}
			}
			if seen {
				p.suffix = append(p.suffix, sp.IDs...)
			} else {
				p.prefix = append(p.prefix, sp.IDs...)
			}
		default:
			return nil, badJSON(fmt.Sprintf("post_processor.single[%d]", i), "neither SpecialToken nor Sequence")
		}
	}
	if !seen {
		return nil, badJSON("post_processor.single", "no $A sequence in the template")
	}
	return p, nil
}
