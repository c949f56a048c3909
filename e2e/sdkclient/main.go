// Command sdkclient runs the official Anthropic and OpenAI Go SDKs inside
// a sandbox in the e2e tests. It takes its base URLs and (placeholder) keys
// from the environment, as the SDKs do by default, and prints what the
// model answered.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: sdkclient anthropic|anthropic-stream|openai-chat|openai-chat-stream|openai-responses MODEL PROMPT")
		os.Exit(2)
	}
	op, model, prompt := os.Args[1], os.Args[2], os.Args[3]
	ctx := context.Background()
	var out string
	var err error
	switch op {
	case "anthropic":
		c := anthropic.NewClient()
		var m *anthropic.Message
		m, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 256,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
		if err == nil {
			for _, b := range m.Content {
				out += b.Text
			}
		}
	case "anthropic-stream":
		c := anthropic.NewClient()
		s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 256,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
		var acc anthropic.Message
		for s.Next() {
			if e := acc.Accumulate(s.Current()); e != nil {
				err = e
				break
			}
		}
		if err == nil {
			err = s.Err()
		}
		for _, b := range acc.Content {
			out += b.Text
		}
	case "openai-chat":
		c := openai.NewClient()
		var r *openai.ChatCompletion
		r, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
		if err == nil && len(r.Choices) > 0 {
			out = r.Choices[0].Message.Content
		}
	case "openai-chat-stream":
		c := openai.NewClient()
		s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
		var b strings.Builder
		for s.Next() {
			for _, ch := range s.Current().Choices {
				b.WriteString(ch.Delta.Content)
			}
		}
		err, out = s.Err(), b.String()
	case "openai-responses":
		c := openai.NewClient()
		var r *responses.Response
		r, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: model,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}})
		if err == nil {
			out = r.OutputText()
		}
	default:
		err = fmt.Errorf("unknown op %q", op)
	}
	if err != nil {
		fmt.Printf("ERROR: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("ANSWER: %s\n", out)
}
