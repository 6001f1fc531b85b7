package client_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tensorbridge/tensorbridge/client"
)

// These examples need a running server (`tensorbridge serve`), so they are
// compiled but not run.

// One inference over HTTP/REST against a server started with
// --auth-token-file: an FP32 input in, an output read back by name.
func ExampleHTTP_Infer() {
	ctx := context.Background()
	c := client.NewHTTP("127.0.0.1:8000", nil).WithToken(os.Getenv("TOKEN"))
	x := client.FromFloat32("x", []int64{1, 4}, []float32{0.1, 0.2, 0.3, 0.4})
	res, err := c.Infer(ctx, "mlp", &client.InferRequest{Inputs: []client.Tensor{x}})
	if err != nil {
		fmt.Println(err) // a *client.Error when the server refused the request
		return
	}
	y, ok := res.Output("y")
	if !ok {
		fmt.Println("no output y")
		return
	}
	v, err := y.Float32s()
	fmt.Println(y.Shape, v, err)
}

// The same over gRPC, with TLS and the server's token: BearerToken with
// requireTLS refuses to send the token over a plaintext connection.
func ExampleDialGRPC() {
	ctx := context.Background()
	c, err := client.DialGRPC("server:8001",
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})),
		client.BearerToken(os.Getenv("TOKEN"), true))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	x := client.FromFloat32("x", []int64{1, 4}, []float32{0.1, 0.2, 0.3, 0.4})
	res, err := c.Infer(ctx, "mlp", &client.InferRequest{Inputs: []client.Tensor{x}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range res.Outputs {
		fmt.Println(t.Name, t.Datatype, t.Shape)
	}
}
