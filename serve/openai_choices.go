package serve

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm"
)

// OpenAI's n: n choices of one prompt, prefilled once by the engine
// (llm.Engine.GenerateN), choice i sampled with llm.ChoiceSeed(seed, i).
// Streamed, their chunks interleave, each with its choice's index;
// whole, the choices come in index order. Usage counts the prompt once and
// every choice's tokens.

// maxChoices is the most choices a request to g may ask for: its
// GeneratorSource.MaxChoices within llm.MaxChoices, and the engine's
// sequences (the n slots are taken at once).
func (g *generator) maxChoices() int {
	n := llm.MaxChoices
	if g.maxN > 0 {
		n = min(n, g.maxN)
	}
	if g.slots > 0 {
		n = min(n, g.slots)
	}
	return n
}

// choices reads n: 1 when absent; outside 1..maxChoices a 400 naming the
// limit. Echo with logprobs takes n = 1 (the prompt's logprobs come with
// the first choice only).
func (q *oaiRequest) choices(g *generator, lp lpSpec) (int, error) {
	if q.N == nil {
		return 1, nil
	}
	limit := g.maxChoices()
	if *q.N < 1 || *q.N > int64(limit) {
		return 0, paramErr("n", "n must be in [1, %d] (this server's limit), got %d", limit, *q.N)
	}
	if *q.N > 1 && lp.echo && lp.on {
		return 0, paramErr("n", "echo with logprobs is served with n = 1 only, got n = %d", *q.N)
	}
	return int(*q.N), nil
}

// runChoices runs n choices of req, streamed (each event a chunk with its
// index, then the usage chunk if asked and [DONE]) or whole.
func (o *oaiOut) runChoices(ctx context.Context, req llm.Request, n int, stream bool) (genStats, error) {
	outs := make([]*oaiOut, n)
	for i := range outs {
		outs[i] = &oaiOut{s: o.s, g: o.g, w: o.w, rc: o.rc, chat: o.chat, lp: o.lp, echo: o.echo, prompt: o.prompt,
			includeUsage: o.includeUsage, index: i, parent: o, id: o.id, created: o.created, tools: o.tools}
	}
	st, err := o.s.runChoiceGeneration(ctx, o.g, req, n, func(i int, ev genEvent) error {
		if stream {
			return outs[i].streamEvent(ev)
		}
		return outs[i].collect(ev)
	})
	if err != nil {
		return st, err
	}
	if stream {
		o.streamEnd(st)
	} else {
		o.writeChoices(outs, st)
	}
	return st, nil
}

// choiceToken is one event of choice i.
type choiceToken struct {
	i int
	t llm.Token
}

// runChoiceGeneration is runGeneration for n choices: emit gets each
// choice's events, in the order they come; the stats count the prompt
// once. It returns an error only when the engine refuses the request.
func (s *Server) runChoiceGeneration(ctx context.Context, g *generator, r llm.Request, n int, emit func(int, genEvent) error) (genStats, error) {
	st := genStats{prompt: len(r.Prompt)}
	e := g.eng.Load()
	if e == nil || !s.Ready() {
		return st, &errs.UnavailableError{Name: g.name, Reason: "the model is not ready (warming up, or the server is shutting down)"}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.genCtx, cancel)
	defer stop()
	start := time.Now()
	chans, err := e.GenerateN(ctx, r, n)
	if err != nil {
		if errors.Is(err, llm.ErrQueueFull) {
			return st, &QueueFullError{Model: g.name, Size: g.opts.MaxQueue}
		}
		return st, err
	}
	g.met.prompt.Add(float64(len(r.Prompt)))
	merged := make(chan choiceToken)
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range ch {
				merged <- choiceToken{i, t}
			}
		}()
	}
	go func() { wg.Wait(); close(merged) }()
	g.waiting.Add(int64(n))
	g.setGauges()
	first := make([]bool, n)
	last := make([]time.Time, n)
	running := 0
	defer func() {
		g.waiting.Add(-int64(n - running))
		g.running.Add(-int64(running))
		g.setGauges()
	}()
	clientGone := false
	for ct := range merged {
		t, i := ct.t, ct.i
		ev := genEvent{text: t.Text, finish: t.Finish, err: t.Err}
		if t.ID >= 0 {
			now := time.Now()
			if !first[i] {
				first[i] = true
				running++
				if running == 1 {
					g.met.ttft.Observe(now.Sub(start).Seconds())
				}
				g.waiting.Add(-1)
				g.running.Add(1)
				g.setGauges()
			} else {
				g.met.tpot.Observe(now.Sub(last[i]).Seconds())
			}
			last[i] = now
			st.completion++
			g.met.generated.Inc()
			ev.ids, ev.logprob, ev.top, ev.prompt = []int{t.ID}, []float32{t.Logprob}, [][]llm.TopLogprob{t.Top}, t.Prompt
		}
		if ev.finish == "cancelled" {
			ev.finish = "abort"
		}
		if clientGone || (ev.text == "" && ev.ids == nil && ev.finish == "") {
			continue
		}
		if err := emit(i, ev); err != nil {
			clientGone = true
			cancel()
		}
	}
	return st, nil
}
