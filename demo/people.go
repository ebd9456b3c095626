package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

var (
	femaleNames = []string{"Анна", "Мария", "Елена", "Ольга", "Наталья", "Ирина", "Светлана", "Татьяна",
		"Юлия", "Ксения", "Дарья", "Алина", "Полина", "Виктория", "Екатерина", "Софья"}
	maleNames = []string{"Алексей", "Дмитрий", "Сергей", "Андрей", "Михаил", "Иван", "Никита", "Артём",
		"Павел", "Егор", "Роман", "Кирилл", "Максим", "Владимир", "Николай", "Георгий"}
	// surnames in the masculine form; the feminine adds "а".
	surnames = []string{"Иванов", "Смирнов", "Кузнецов", "Попов", "Васильев", "Петров", "Соколов",
		"Михайлов", "Новиков", "Фёдоров", "Морозов", "Волков", "Алексеев", "Лебедев", "Семёнов",
		"Егоров", "Павлов", "Козлов", "Степанов", "Николаев", "Орлов", "Андреев", "Макаров", "Никитин", "Захаров"}
	customerTexts = []string{
		"Здравствуйте! Есть ли у вас букеты с доставкой сегодня?",
		"Добрый день, сколько стоит доставка по городу?",
		"Можно заказать композицию к юбилею на пятницу?",
		"Подскажите, вы работаете в выходные?",
		"Хочу оплатить заказ картой курьеру, так можно?",
		"Спасибо, букет чудесный! Закажу ещё.",
		"А есть пионы? Нужно 15 штук.",
		"Мой заказ ещё не пришёл, подскажите статус, пожалуйста.",
	}
	operatorTexts = []string{
		"Да, конечно, оформим!",
		"Доставка по городу — 350 ₽, курьер приедет за 2 часа.",
		"Работаем без выходных с 9 до 21.",
		"Уточнила у флориста: всё будет к сроку.",
		"Заказ уже у курьера, он позвонит за 15 минут.",
	}
)

// person is a random Russian name.
func (s *sim) person() (first, last string) {
	last = surnames[s.intn(len(surnames))]
	if s.chance(0.5) {
		return femaleNames[s.intn(len(femaleNames))], last + "а"
	}
	return maleNames[s.intn(len(maleNames))], last
}

// phone is a random Russian mobile number.
func (s *sim) phone() string { return fmt.Sprintf("+7916%07d", s.intn(10_000_000)) }

// wallet is a random TON-like address.
func (s *sim) wallet() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var b strings.Builder
	b.WriteString("UQ")
	for range 46 {
		b.WriteByte(alphabet[s.intn(len(alphabet))])
	}
	return b.String()
}

// stepError is a journey's failure at a named step, with a reason short
// and stable enough to count journeys by.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + short(e.err) }

func (e *stepError) Unwrap() error { return e.err }

func failed(step string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &stepError{step: step, err: err}
}

// errNoAnswer is a wait for the instance that ran out of time.
var errNoAnswer = fmt.Errorf("no answer within %s", stepTimeout)

// short says what went wrong without the ids that make every error unique.
func short(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		if ae.Code != "" {
			return fmt.Sprintf("HTTP %d %s", ae.Status, ae.Code)
		}
		return fmt.Sprintf("HTTP %d", ae.Status)
	}
	return err.Error()
}
